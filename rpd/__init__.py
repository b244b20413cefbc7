"""rpd: PipeDream-style asynchronous pipeline parallelism vs LocalSGD, in simulated time.

The linear objectives run in float64 (to match the reference code), so importing rpd turns on
``jax_enable_x64``; the language model keeps its parameters in float32 explicitly.
"""

import jax

jax.config.update("jax_enable_x64", True)

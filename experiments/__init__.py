"""The command-line entry points (``python -m experiments.<name>``): thin hydra/argparse layers
over their jobs in ``rpd.cli``. Run as a program, Ctrl-C is clean from the first import on
(``rpd.runtime.interrupt``)."""

import logging
import os
import signal
import sys

# hydra's job logging sets the root logger to INFO; matplotlib's PDF backend then logs every glyph
# of its font subsetting through fontTools. Entry points print what they made themselves.
logging.getLogger("fontTools").setLevel(logging.WARNING)
logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'"


def _exit_now(signum, frame):  # pragma: no cover - only until rpd.runtime.interrupt replaces it below
    os.write(2, b"\ninterrupted (Ctrl-C) while starting: nothing was run or stored\n")
    os._exit(130)


# runpy sets argv[0] to "-m" while it imports the package of `python -m experiments.<name>`
if sys.argv[:1] == ["-m"] and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, _exit_now)  # rpd imports JAX (0.5 s); nothing is in flight yet
    from rpd.runtime import interrupt

    interrupt.install()

"""Run ``python -m experiments.<name> <args>`` for each line of a JSON list on argv[1], one after
another in this one process (runpy as ``__main__``, as ``python -m`` runs it, imports shared), each
in its own working directory; write each exit status and stderr to the JSON file argv[2]
(tests/experiments/test_refusal_leaves_nothing.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys

runs = json.loads(open(sys.argv[1]).read())  # [[cwd, module, [args]], ...]
report = sys.argv[2]
out = []
for cwd, module, args in runs:
    os.chdir(cwd)
    sys.argv = [module, *args]
    sys.modules.pop(module, None)  # afresh as __main__
    err = io.StringIO()
    code = None
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code
    out.append({"module": module, "code": code, "stderr": err.getvalue()})
with open(report, "w") as f:
    json.dump(out, f)

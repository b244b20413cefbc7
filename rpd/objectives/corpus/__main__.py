"""``python -m rpd.objectives.corpus fetch | verify | info``: the corpus's command line, run as
this package's ``__main__`` so that importing :mod:`rpd.objectives` (which registers the language
model through :mod:`rpd.objectives.corpus`) before running it raises no runpy warning."""

from rpd.objectives.corpus import main

main()

"""The `trinity` command and its sub-commands (`main.py` dispatches; run, convert, debug, studio, log, view)."""

"""A child process for the kill and signal tests (test_flush.py, test_hostile_resume.py): the
real CLI, with ``train_arm``'s progress callback wrapped to park after each update.

Run it as ``[sys.executable, "-c", PARKED_CHILD, *cli_args]``. After update U's row was handed to
the recorder it prints ``reached U`` and blocks on stdin until the test writes a line (or kills
it), so the last finished update is known exactly: no polling race, no sleep.
"""

PARKED_CHILD = """
import sys
from andrea_diag.experiments import cascade
real = cascade.train_arm
def parked(*args, progress=None, **kwargs):
    def tick(update, row):
        progress(update, row)
        print(f"reached {update}", flush=True)
        sys.stdin.readline()  # parked until the test answers (or kills this process)
    return real(*args, progress=tick, **kwargs)
cascade.train_arm = parked
from andrea_diag.cli import app
app(sys.argv[1:], prog_name="andrea-diag")
"""

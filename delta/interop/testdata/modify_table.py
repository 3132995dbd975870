"""Write with delta-rs (the Python `deltalake` package) on top of a table that
cdcapply wrote, so the Go test can check that our log and files are a valid
base for another writer and that we read what it committed.

usage: modify_table.py TABLE_DIR

Commits, in order: a delete of every row whose id is a multiple of 5 (with an
app transaction "py-mixed" = 1), a compaction (optimize: removes and adds with
dataChange false), and a checkpoint. Prints {"version": N} after them.
"""

import json
import os
import sys

from deltalake import CommitProperties, DeltaTable, Transaction


def main():
    dt = DeltaTable(sys.argv[1])
    # The delete prunes files by our add actions' stats: wrong stats would
    # leave rows behind, which the test's oracle catches.
    dt.delete("id % 5 = 0", commit_properties=CommitProperties(app_transactions=[Transaction("py-mixed", 1)]))
    dt.optimize.compact()
    dt.create_checkpoint()
    dt = DeltaTable(sys.argv[1])
    json.dump({"version": dt.version()}, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    # Skip interpreter teardown (see read_table.py).
    os._exit(0)


if __name__ == "__main__":
    main()

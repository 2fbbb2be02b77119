"""`python -m server [serve options]` runs the server; `python -m server COMMAND ...` runs any `hearth` command."""

import sys

from server.cli import COMMANDS, main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] not in (*COMMANDS, "-h", "--help"):
        args = ["serve", *args]
    sys.exit(main(args))

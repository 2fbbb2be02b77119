"""`python -m server [serve options]` runs the server (`python -m server generate ...` and `profile` work too)."""

import sys

from server.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] not in ("serve", "generate", "profile", "-h", "--help"):
        args = ["serve", *args]
    sys.exit(main(args))

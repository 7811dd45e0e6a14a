"""`python -m bertkit` is the `bertkit` command."""

from bertkit.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

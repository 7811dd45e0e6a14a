"""What every layer shares, and nothing else: the atomic write every saved file goes through (atomic.py), the
one check of a number against its range that options, training arguments and command-line flags all use
(ranges.py), the file lock the caches take turns by (locking.py), the worker pool (processes.py), the
counter-based random source (rng.py: splitmix64), JSON from the user's files read so that no nesting escapes its
reader's message (jsonfiles.py), the one rule for empty text: no visible character (visible.py), and conventions
more than one layer writes down (constants.py).
Nothing here imports torch or another part of bertkit but its error family (bertkit.errors)."""

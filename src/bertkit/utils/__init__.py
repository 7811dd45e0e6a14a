"""What every layer shares, and nothing else: the atomic write every saved file goes through (atomic.py), and the
one check of a number against its range that options, training arguments and command-line flags all use
(ranges.py). Nothing here imports torch or another part of bertkit."""

"""The peers-at-scale benchmark's shared parts (issue 48): the emulated trial every
system runs (``emulator``), its work log and the exact count of redone and lost work
(``worklog``), and the seeded background trace of other users' jobs (``trace``).
See bench/peers_scale/README.md."""

"""What the loop trains on: the built-in, seq2seq and user-object sources, and the driver-side checks of the user's
objects."""

"""Data: the built-in tasks, files and the hub, tokenizers and packing, seq2seq pairs."""

"""Moonshine speech recognition: the checkpoint reader (checkpoint), the network (net) and the loaded model (model)."""

"""Whisper speech recognition: the network (net), decoding as faster-whisper does it (decode), word timing
(align), checkpoint readers and the tokenizer (weights), and the loaded model (model)."""

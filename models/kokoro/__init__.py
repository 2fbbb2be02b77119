"""Kokoro-82M text to speech: the text front end (normalize, phonemes), voices, the converter from upstream's
checkpoints to our GGUF (convert), the weights on the GPU (weights), the network (net), the loaded model (model) and
the harmonic source's noise in numpy for references (noise)."""

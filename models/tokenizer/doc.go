// Package tokenizer owns text ↔ token ids for every model PocketLLM serves:
// byte-level BPE loaded from a Hugging Face tokenizer.json (or from a GGUF
// vocabulary through FromVocab), added and special tokens, byte-level
// decoding with streaming (Decoder), the end-of-sequence set, and chat
// templates rendered with gonja (ApplyChatTemplate).
//
// Encoding follows Hugging Face tokenizers exactly for the pipelines used by
// Qwen2/Qwen3, Llama 3 and DeepSeek-V3 (the tests compare against ids that
// the Rust library produced): added tokens are split out of the raw text
// first, the rest is normalized, pre-tokenized (regex Split + ByteLevel) and
// each word is run through BPE merges by rank. Encode never adds BOS/EOS.
//
// A Tokenizer is immutable after construction and safe for concurrent use.
package tokenizer

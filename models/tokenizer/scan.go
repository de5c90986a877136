package tokenizer

// knownScanner returns a hand-written scanner for expr when one exists.
func knownScanner(expr string) pattern { return nil }

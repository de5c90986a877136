package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrUnsupported is returned (wrapped) for tokenizer files that use a
// model or component this package does not implement.
var ErrUnsupported = errors.New("unsupported tokenizer")

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// Tokenizer is a byte-level BPE tokenizer with its added tokens and chat
// template. It is immutable and safe for concurrent use.
type Tokenizer struct {
	model      *bpe
	tokens     []string // id → token spelling ("" for unused ids)
	decoded    [][]byte // id → bytes the token decodes to
	added      []*addedToken
	addedByID  map[int32]*addedToken
	addedByStr map[string]*addedToken
	rawAdded   *addedMatcher // added tokens matched in the raw text
	normAdded  *addedMatcher // added tokens matched after normalization
	normalize  normalizer    // nil: none
	preSteps   []preStep
	bos        int32 // -1: none
	eos        []int32
	bosToken   string // template variables
	eosToken   string
	hasBOSTok  bool
	hasEOSTok  bool
	chat       *chatTemplate   // nil: none
	template   []templatePiece // the post-processor's single template (EncodeSpecial); nil: none
}

// Load reads dir/tokenizer.json (or tokenizer.json.gz) and, when present,
// dir/tokenizer_config.json, dir/chat_template.jinja and
// dir/generation_config.json (its eos_token_id joins EOS()).
func Load(dir string) (*Tokenizer, error) {
	tj, err := readMaybeGz(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := New(tj, cfg)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", dir, err)
	}
	if t.chat == nil {
		if tmpl, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			t.chat = newChatTemplate(string(tmpl))
		}
	}
	if gen, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		var g struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if json.Unmarshal(gen, &g) == nil {
			var one int32
			var many []int32
			if json.Unmarshal(g.EOS, &one) == nil {
				t.addEOS(one)
			} else if json.Unmarshal(g.EOS, &many) == nil {
				for _, id := range many {
					t.addEOS(id)
				}
			}
		}
	}
	return t, nil
}

// readMaybeGz reads path, or path+".gz" decompressed when path is missing.
func readMaybeGz(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return b, err
	}
	gz, gzErr := os.ReadFile(path + ".gz")
	if gzErr != nil {
		return nil, err
	}
	zr, zerr := gzip.NewReader(bytes.NewReader(gz))
	if zerr != nil {
		return nil, fmt.Errorf("%s.gz: %w", path, zerr)
	}
	b, err = io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s.gz: %w", path, err)
	}
	return b, nil
}

// New builds a tokenizer from the contents of tokenizer.json and
// tokenizer_config.json (configJSON may be nil).
func New(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" && f.Model.Type != "" {
		return nil, fmt.Errorf("tokenizer.json: model %q: %w", f.Model.Type, ErrUnsupported)
	}
	if f.Model.Type == "" && f.Model.Vocab == nil {
		return nil, fmt.Errorf("tokenizer.json: no model: %w", ErrUnsupported)
	}
	if (f.Model.ContinuingSubwordPrefix != nil && *f.Model.ContinuingSubwordPrefix != "") ||
		(f.Model.EndOfWordSuffix != nil && *f.Model.EndOfWordSuffix != "") {
		return nil, fmt.Errorf("tokenizer.json: BPE subword prefix/suffix: %w", ErrUnsupported)
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := &Tokenizer{bos: -1}
	if !isNull(f.Normalizer) {
		c, err := parseComponent(f.Normalizer)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.json: normalizer: %w", err)
		}
		if t.normalize, err = buildNormalizer(c); err != nil {
			return nil, fmt.Errorf("tokenizer.json: normalizer: %w: %w", ErrUnsupported, err)
		}
	}
	byteLevel := false
	if !isNull(f.PreTokenizer) {
		c, err := parseComponent(f.PreTokenizer)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.json: pre_tokenizer: %w", err)
		}
		if t.preSteps, err = buildPreTokenizer(c, nil, &byteLevel); err != nil {
			return nil, fmt.Errorf("tokenizer.json: pre_tokenizer: %w: %w", ErrUnsupported, err)
		}
	}
	if !byteLevel {
		return nil, fmt.Errorf("tokenizer.json: no ByteLevel pre-tokenizer (only byte-level BPE is implemented): %w", ErrUnsupported)
	}
	if !isNull(f.Decoder) {
		if err := checkDecoder(f.Decoder); err != nil {
			return nil, fmt.Errorf("tokenizer.json: decoder: %w: %w", ErrUnsupported, err)
		}
	}
	unk := int32(-1)
	if f.Model.UnkToken != nil {
		id, ok := f.Model.Vocab[*f.Model.UnkToken]
		if !ok {
			return nil, fmt.Errorf("tokenizer.json: unk_token %q not in vocabulary", *f.Model.UnkToken)
		}
		unk = id
	}
	added := make([]*addedToken, 0, len(f.AddedTokens))
	for _, a := range f.AddedTokens {
		added = append(added, &addedToken{id: a.ID, content: a.Content, special: a.Special,
			lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord, normalized: a.Normalized})
	}
	if err := t.init(f.Model.Vocab, merges, unk, f.Model.IgnoreMerges, added); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if t.template, err = parseTemplate(f.PostProc); err != nil {
		return nil, fmt.Errorf("tokenizer.json: post_processor: %w", err)
	}
	for _, p := range t.template {
		for _, id := range p.ids {
			if id < 0 || int(id) >= len(t.tokens) {
				return nil, fmt.Errorf("tokenizer.json: post_processor: token id %d outside the vocabulary", id)
			}
		}
	}
	if len(configJSON) > 0 {
		if err := t.applyConfig(configJSON); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	t.addDefaultEOS()
	return t, nil
}

func checkDecoder(raw json.RawMessage) error {
	c, err := parseComponent(raw)
	if err != nil {
		return err
	}
	switch c.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		if len(c.Decoders) != 1 {
			return errors.New("only a Sequence of one ByteLevel decoder is supported")
		}
		return checkDecoder(c.Decoders[0])
	}
	return fmt.Errorf("decoder %q", c.Type)
}

// maxVocab bounds ids, and maxIDGap the unused ids, so that a hostile
// file cannot make us allocate gigabytes for the id table.
const (
	maxVocab = 1 << 24
	maxIDGap = 1 << 16
)

func (t *Tokenizer) init(vocab map[string]int32, merges [][2]string, unk int32, ignoreMerges bool, added []*addedToken) error {
	size := 0
	for tok, id := range vocab {
		if id < 0 || id >= maxVocab {
			return fmt.Errorf("token %q: id %d out of range", tok, id)
		}
		size = max(size, int(id)+1)
	}
	for _, a := range added {
		if a.id < 0 || a.id >= maxVocab {
			return fmt.Errorf("added token %q: id %d out of range", a.content, a.id)
		}
		size = max(size, int(a.id)+1)
	}
	if size > len(vocab)+len(added)+maxIDGap {
		return fmt.Errorf("ids up to %d for %d tokens", size-1, len(vocab)+len(added))
	}
	m, err := newBPE(vocab, merges, unk, ignoreMerges)
	if err != nil {
		return err
	}
	t.model = m
	t.tokens = make([]string, size)
	t.decoded = make([][]byte, size)
	for tok, id := range vocab {
		t.tokens[id] = tok
	}
	t.added = added
	t.addedByID = make(map[int32]*addedToken, len(added))
	t.addedByStr = make(map[string]*addedToken, len(added))
	for _, a := range added {
		t.tokens[a.id] = a.content
		t.addedByID[a.id] = a
		if _, dup := t.addedByStr[a.content]; !dup {
			t.addedByStr[a.content] = a
		}
	}
	for id, tok := range t.tokens {
		t.decoded[id] = tokenBytes(tok)
	}
	var raw, normed []*addedToken
	for _, a := range added {
		if a.normalized && t.normalize != nil {
			normed = append(normed, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.rawAdded = newAddedMatcher(raw, func(a *addedToken) string { return a.content })
	t.normAdded = newAddedMatcher(normed, func(a *addedToken) string { return t.normalize(a.content) })
	return nil
}

// tokenName reads a special-token entry of tokenizer_config.json: a string,
// null, or an AddedToken object with "content".
func tokenName(raw json.RawMessage) (string, bool) {
	if isNull(raw) {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}

func (t *Tokenizer) applyConfig(configJSON []byte) error {
	var cfg struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
		Class        string          `json:"tokenizer_class"`
		AddBOS       *bool           `json:"add_bos_token"`
		AddEOS       *bool           `json:"add_eos_token"`
	}
	if err := json.Unmarshal(configJSON, &cfg); err != nil {
		return err
	}
	defer func() {
		if flagsTemplate(cfg.Class) {
			t.setFlagsTemplate(cfg.AddBOS == nil || *cfg.AddBOS, cfg.AddEOS != nil && *cfg.AddEOS)
		}
	}()
	if s, ok := tokenName(cfg.BOS); ok {
		t.bosToken, t.hasBOSTok = s, true
		if id, ok := t.TokenID(s); ok {
			t.bos = id
		}
	}
	if s, ok := tokenName(cfg.EOS); ok {
		t.eosToken, t.hasEOSTok = s, true
		if id, ok := t.TokenID(s); ok {
			t.addEOS(id)
		}
	}
	if !isNull(cfg.ChatTemplate) {
		var s string
		if json.Unmarshal(cfg.ChatTemplate, &s) == nil {
			t.chat = newChatTemplate(s)
		} else {
			// A list of named templates: use "default".
			var named []struct{ Name, Template string }
			if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
				return fmt.Errorf("chat_template: %w", err)
			}
			for _, n := range named {
				if n.Name == "default" {
					t.chat = newChatTemplate(n.Template)
				}
			}
		}
	}
	return nil
}

// flagsTemplate tells the tokenizer classes whose Hugging Face fast
// tokenizer rebuilds the post-processor from add_bos_token (default true)
// and add_eos_token (default false) when it loads, whatever tokenizer.json
// says: DeepSeek-V3's LlamaTokenizerFast adds its BOS that way.
func flagsTemplate(class string) bool {
	class = strings.TrimSuffix(class, "Fast")
	return class == "LlamaTokenizer" || class == "CodeLlamaTokenizer" || class == "GemmaTokenizer"
}

// setFlagsTemplate makes the post-processor's template BOS (if addBOS and
// the vocabulary has one), the text, then the first EOS (if addEOS).
func (t *Tokenizer) setFlagsTemplate(addBOS, addEOS bool) {
	t.template = nil
	if addBOS && t.bos >= 0 {
		t.template = append(t.template, templatePiece{ids: []int32{t.bos}})
	}
	t.template = append(t.template, templatePiece{})
	if addEOS && t.eosToken != "" {
		if id, ok := t.TokenID(t.eosToken); ok {
			t.template = append(t.template, templatePiece{ids: []int32{id}})
		}
	}
}

// endTokens are end-of-turn/end-of-text tokens that stop generation when
// they are special tokens of the vocabulary, as llama.cpp's EOG set and
// the models' generation_config.json do.
var endTokens = []string{
	"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
	"<｜end▁of▁sentence｜>", "<end_of_turn>", "<|end|>", "<|return|>", "<|call|>",
}

func (t *Tokenizer) addDefaultEOS() {
	for _, s := range endTokens {
		if id, ok := t.TokenID(s); ok && t.IsSpecial(id) {
			t.addEOS(id)
		}
	}
}

func (t *Tokenizer) addEOS(id int32) {
	if id >= 0 && int(id) < len(t.tokens) && !slices.Contains(t.eos, id) {
		t.eos = append(t.eos, id)
	}
}

// Encode returns the ids of text with no BOS/EOS added. Added and special
// tokens written in the text are recognized (HF add_special_tokens=False).
func (t *Tokenizer) Encode(text string) []int32 {
	var ids []int32
	encodeWord := func(w string) { ids = t.model.encodeWord(w, ids) }
	for _, seg := range t.rawAdded.split(text, nil) {
		if seg.tok != nil {
			ids = append(ids, seg.tok.id)
			continue
		}
		s := seg.text
		if t.normalize != nil {
			s = t.normalize(s)
		}
		for _, seg2 := range t.normAdded.split(s, nil) {
			if seg2.tok != nil {
				ids = append(ids, seg2.tok.id)
				continue
			}
			t.preTokenize(seg2.text, 0, encodeWord)
		}
	}
	return ids
}

// preTokenize runs s through pre-tokenizer steps from step on, calling
// emit with each final word.
func (t *Tokenizer) preTokenize(s string, step int, emit func(string)) {
	if s == "" {
		return
	}
	if step == len(t.preSteps) {
		emit(s)
		return
	}
	t.preSteps[step].split(s, func(p string) { t.preTokenize(p, step+1, emit) })
}

// TokenString is the vocabulary spelling of id (byte-level characters for
// normal tokens, e.g. "Ġhello"); "" for an unknown id.
func (t *Tokenizer) TokenString(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// VocabSize is one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID looks a token up by its spelling (added tokens first).
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	if a, ok := t.addedByStr[s]; ok {
		return a.id, true
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// EOS lists the ids that end generation: the configured eos_token, the
// generation_config.json ids (Load), and the vocabulary's special
// end-of-turn tokens such as <|im_end|>, <|endoftext|> or <|eot_id|>.
func (t *Tokenizer) EOS() []int32 { return slices.Clone(t.eos) }

// BOS is the beginning-of-sequence token, if the model has one.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// IsSpecial reports whether id is a special (control) token.
func (t *Tokenizer) IsSpecial(id int32) bool {
	a, ok := t.addedByID[id]
	return ok && a.special
}

package tokenizer

import (
	"slices"
	"testing"
	"unicode/utf8"
)

var scannerPatterns = []string{patQwen2, patLlama3, patDSDigits, patDSCJK, patDSMain}

// scanSeeds are texts that exercise the regex corners.
var scanSeeds = []string{
	"", " ", "  ", "\n", " \n ", "a  b", "a \n\n b", "x\r\n\r\n  y", "\t\t\tindent",
	"it's I'M we'LL 'RE 'x 'ſ", "don't' 'tis", "abc123456def 1,000.5 ١٢٣٤", "٣x",
	"(hello) [world]! ,a .b", " !!!?? \n\n", "😀🎉 👍🏽", "中文测试 日本語のテキスト カタカナ",
	"naïve e\u0301 \u0301a", "tab\tsep\u00a0nbsp\u2003em\u3000ideo", "\xff\xfe bad \xc3 utf8",
	"x  \u2028y", "Ⅻ ½ ²", "a.b,c;d", "  lead", "trail  ", "mixed中文and English混合text123",
}

func TestScannersMatchRegexp2(t *testing.T) {
	texts := append([]string(nil), scanSeeds...)
	texts = append(texts, loadReference(t).Cases.Texts...)
	for _, expr := range scannerPatterns {
		sc := knownScanner(expr)
		re, err := compileRegexp2(expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			if got, want := findAll(sc, s), findAll(re, s); !slices.Equal(got, want) {
				t.Errorf("pattern %q on %q:\n scanner %v\n regexp2 %v", expr, s, got, want)
			}
		}
	}
}

// TestFixturesUseScanners makes sure the fast path is taken for the real
// tokenizers (a pattern text changed by one byte would silently fall back).
func TestFixturesUseScanners(t *testing.T) {
	for _, name := range fixtureNames {
		tk := loadFixture(t, name)
		for _, st := range tk.preSteps {
			if sp, ok := st.(*splitStep); ok {
				if _, slow := sp.pat.(*regexPattern); slow {
					t.Errorf("%s: a Split uses regexp2, not a scanner", name)
				}
			}
		}
	}
}

func FuzzScanners(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add(s)
	}
	res := make([]*regexPattern, len(scannerPatterns))
	for i, expr := range scannerPatterns {
		re, err := compileRegexp2(expr)
		if err != nil {
			f.Fatal(err)
		}
		res[i] = re
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // regexp2 sees U+FFFD; the scanners see the same, but skip the noise
		}
		for i, expr := range scannerPatterns {
			if got, want := findAll(knownScanner(expr), s), findAll(res[i], s); !slices.Equal(got, want) {
				t.Errorf("pattern %q on %q:\n scanner %v\n regexp2 %v", expr, s, got, want)
			}
		}
	})
}

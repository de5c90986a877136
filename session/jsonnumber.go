package session

// numMag follows a JSON number's decimal magnitude while it is generated,
// so that JSON mode and schema-constrained output keep to numbers a
// float64 holds. RFC 8259 allows any number, but its §6 says
// interoperable readers expect no more range than IEEE 754 binary64:
// encoding/json refuses 1e309 into a float64 and JavaScript reads it as
// Infinity. Underflow is harmless (such a number reads as 0), so only
// overflow is refused, and only where it is certain, so that every
// number a float64 holds can still be written.
type numMag struct {
	lead   int32    // decimal exponent of the first nonzero digit, before the exponent part
	fracAt int32    // fraction digits so far
	n      uint8    // significant digits kept in d: 0 until a nonzero digit
	d      [20]byte // the first significant digits
	exp    int32    // the exponent part so far (saturating at maxExp)
	expNeg bool
}

// maxFloatDigits are the first 20 digits of the smallest decimal that
// rounds past math.MaxFloat64 (2^1024 - 2^970, ties rounding to the odd
// maximum's even neighbour, +Inf), whose first digit's exponent is 308.
const maxFloatDigits = "17976931348623158079"

// maxExp bounds the exponent part's value as numMag keeps it, so that its
// sums stay in an int32; only a number of over a million digits before
// its exponent could be judged otherwise than without the bound.
const maxExp = 1 << 20

// digit records digit c of the number's integer part (sub jNumInt), its
// fraction (jNumFrac) or its exponent (jNumExp).
func (m *numMag) digit(sub jsonMode, c byte) {
	switch sub {
	case jNumInt:
		switch {
		case m.n > 0:
			m.lead++
		case c == '0':
			return // a leading zero: no magnitude yet
		default:
			m.lead = 0
		}
	case jNumFrac:
		m.fracAt++
		if m.n == 0 {
			if c == '0' {
				return
			}
			m.lead = -m.fracAt
		}
	case jNumExp:
		if m.exp < maxExp {
			m.exp = m.exp*10 + int32(c-'0')
		}
		return
	default:
		return
	}
	if int(m.n) < len(m.d) {
		m.d[m.n] = c
		m.n++
	}
}

// magnitude is the decimal exponent of the number's first nonzero digit.
func (m *numMag) magnitude() int32 {
	if m.expNeg {
		return m.lead - m.exp
	}
	return m.lead + m.exp
}

// surelyOverflows reports whether every continuation of the exponent read
// so far overflows a float64: a positive exponent only grows.
func (m *numMag) surelyOverflows() bool {
	return m.n > 0 && !m.expNeg && m.magnitude() >= 309
}

// overflows reports whether the complete number rounds past
// math.MaxFloat64. At the boundary magnitude it compares the first 20
// significant digits with maxFloatDigits; a number that matches all 20
// counts as overflowing (a float64 needs 17 digits, and nothing shorter
// lies that close to the bound).
func (m *numMag) overflows() bool {
	if m.n == 0 {
		return false // zero
	}
	switch mag := m.magnitude(); {
	case mag > 308:
		return true
	case mag < 308:
		return false
	}
	for i := range len(maxFloatDigits) {
		c := byte('0')
		if i < int(m.n) {
			c = m.d[i]
		}
		if c != maxFloatDigits[i] {
			return c > maxFloatDigits[i]
		}
	}
	return true
}

package schema

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Quantities use Kubernetes notation: an optionally fractional decimal number
// followed by a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal suffix (m k M G T
// P E) or an exponent (e3, E-2). Fleet never accepts negative quantities.

var quantitySuffixes = []struct {
	suffix string
	num    *big.Rat
}{
	{"Ki", new(big.Rat).SetInt64(1 << 10)},
	{"Mi", new(big.Rat).SetInt64(1 << 20)},
	{"Gi", new(big.Rat).SetInt64(1 << 30)},
	{"Ti", new(big.Rat).SetInt64(1 << 40)},
	{"Pi", new(big.Rat).SetInt64(1 << 50)},
	{"Ei", new(big.Rat).SetInt64(1 << 60)},
	{"m", big.NewRat(1, 1000)},
	{"k", new(big.Rat).SetInt64(1e3)},
	{"M", new(big.Rat).SetInt64(1e6)},
	{"G", new(big.Rat).SetInt64(1e9)},
	{"T", new(big.Rat).SetInt64(1e12)},
	{"P", new(big.Rat).SetInt64(1e15)},
	{"E", new(big.Rat).SetInt64(1e18)},
}

// parseQuantity returns the value of s as an exact rational.
func parseQuantity(s string) (*big.Rat, error) {
	if s == "" {
		return nil, fmt.Errorf("empty quantity")
	}
	if len(s) > 64 {
		return nil, fmt.Errorf("quantity %q is too long", s)
	}
	if strings.HasPrefix(s, "-") {
		return nil, fmt.Errorf("quantity %q must not be negative", s)
	}
	num, mult := s, new(big.Rat).SetInt64(1)
	for _, sx := range quantitySuffixes {
		if strings.HasSuffix(s, sx.suffix) {
			num, mult = strings.TrimSuffix(s, sx.suffix), sx.num
			break
		}
	}
	if i := strings.IndexAny(num, "eE"); i >= 0 && mult.Cmp(big.NewRat(1, 1)) == 0 {
		exp := num[i+1:]
		num = num[:i]
		var e int
		if _, err := fmt.Sscanf(exp, "%d", &e); err != nil || e < -18 || e > 18 || !isDigits(strings.TrimLeft(exp, "+-")) {
			return nil, fmt.Errorf("quantity %q has a malformed exponent", s)
		}
		ten := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(e))), nil)
		if e >= 0 {
			mult = new(big.Rat).SetInt(ten)
		} else {
			mult = new(big.Rat).SetFrac(big.NewInt(1), ten)
		}
	}
	num = strings.TrimPrefix(num, "+")
	intPart, frac, _ := strings.Cut(num, ".")
	if (intPart == "" && frac == "") || !isDigits(intPart) || !isDigits(frac) {
		return nil, fmt.Errorf("quantity %q is malformed: want a number with an optional suffix such as 64Mi or 500m", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return nil, fmt.Errorf("quantity %q is malformed", s)
	}
	return r.Mul(r, mult), nil
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// ParseMemory returns a memory quantity ("64Mi", "1G", "1048576") in bytes,
// rounded up to a whole byte.
func ParseMemory(s string) (int64, error) {
	if n, ok := fastQuantity(s, false); ok {
		return n, nil
	}
	r, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	return ceilInt64(r, s)
}

// ParseCPU returns a CPU quantity ("500m", "1.5", "2") in millicores,
// rounded up.
func ParseCPU(s string) (int64, error) {
	if n, ok := fastQuantity(s, true); ok {
		return n, nil
	}
	r, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	return ceilInt64(r.Mul(r, big.NewRat(1000, 1)), s)
}

// fastQuantity reads the forms limits are written in (digits and at most
// one suffix: "64Mi", "250m", "2", "1G") with integer arithmetic, in
// bytes or, with milli, in thousandths; the agent parses a container's
// limits on every create. It declines (ok false) anything else, and any
// value that does not fit below math.MaxInt64, for the exact parser to
// read or refuse; FuzzFastQuantity holds the two to the same answers.
func fastQuantity(s string, milli bool) (n int64, ok bool) {
	digits, shift, pow10 := s, 0, 0
	switch {
	case len(s) >= 2 && s[len(s)-1] == 'i':
		i := strings.IndexByte("KMGTPE", s[len(s)-2])
		if i < 0 {
			return 0, false
		}
		digits, shift = s[:len(s)-2], 10*(i+1)
	case len(s) >= 1 && s[len(s)-1] == 'm':
		digits, pow10 = s[:len(s)-1], -3
	case len(s) >= 1:
		if i := strings.IndexByte("kMGTPE", s[len(s)-1]); i >= 0 {
			digits, pow10 = s[:len(s)-1], 3*(i+1)
		}
	}
	// 18 digits stay below 10^18, so the sums and products below are
	// checked against overflow one step at a time.
	if digits == "" || len(digits) > 18 || !isDigits(digits) {
		return 0, false
	}
	for _, c := range digits {
		n = n*10 + int64(c-'0')
	}
	if milli {
		pow10 += 3
	}
	if n != 0 && shift > 0 {
		if n > math.MaxInt64>>shift {
			return 0, false
		}
		n <<= shift
	}
	for ; pow10 > 0; pow10-- {
		if n > (math.MaxInt64-9)/10 {
			return 0, false
		}
		n *= 10
	}
	if pow10 < 0 { // thousandths of a byte: round up
		n = (n + 999) / 1000
	}
	return n, n != math.MaxInt64
}

func ceilInt64(r *big.Rat, s string) (int64, error) {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() == math.MaxInt64 {
		return 0, fmt.Errorf("quantity %q is too large", s)
	}
	return q.Int64(), nil
}

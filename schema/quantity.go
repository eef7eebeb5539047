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
	r, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	return ceilInt64(r, s)
}

// ParseCPU returns a CPU quantity ("500m", "1.5", "2") in millicores,
// rounded up.
func ParseCPU(s string) (int64, error) {
	r, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	return ceilInt64(r.Mul(r, big.NewRat(1000, 1)), s)
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

package schema

import (
	"math"
	"math/big"
	"regexp"
	"strconv"
	"testing"
)

// plainDecimal is a quantity without sign, suffix or exponent.
var plainDecimal = regexp.MustCompile(`^([0-9]+\.?[0-9]*|\.[0-9]+)$`)

// FuzzQuantity: ParseMemory and ParseCPU read the same number (bytes are
// millicores / 1000, rounded up), never negative; n with a suffix is
// exactly n times the suffix's value; and a plain decimal is read as
// strconv.ParseFloat reads it, up to rounding.
func FuzzQuantity(f *testing.F) {
	for _, s := range []string{"64Mi", "1.5Gi", "1e3", "500m", "-1", "1e-3", "0.1m", "+1", "1E18", "9223372036854775807", ".5", "5.", "1e", "Ki", "1.5e-2", "0x10", "1_000"} {
		f.Add(s, uint32(3), uint8(0))
	}
	f.Fuzz(func(t *testing.T, s string, n uint32, suffix uint8) {
		mem, memErr := ParseMemory(s)
		cpu, cpuErr := ParseCPU(s)
		if memErr == nil && mem < 0 || cpuErr == nil && cpu < 0 {
			t.Fatalf("%q: negative: memory %d, cpu %d", s, mem, cpu)
		}
		if cpuErr == nil && memErr != nil {
			t.Fatalf("%q: ParseCPU = %d, but ParseMemory fails: %v", s, cpu, memErr)
		}
		if memErr == nil && cpuErr == nil && mem != ceilDiv(cpu, 1000) {
			t.Fatalf("%q: ParseMemory = %d, ParseCPU = %d millicores", s, mem, cpu)
		}
		if plainDecimal.MatchString(s) && len(s) <= 64 {
			want, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("ParseFloat(%q): %v", s, err)
			}
			switch {
			case want < 1<<52 && memErr != nil:
				t.Fatalf("ParseMemory(%q): %v, want about %g", s, memErr, want)
			case memErr == nil && want < 1<<52 && math.Abs(float64(mem)-math.Ceil(want)) > 1:
				t.Fatalf("ParseMemory(%q) = %d, want about %g", s, mem, math.Ceil(want))
			}
		}

		sx := quantitySuffixes[int(suffix)%len(quantitySuffixes)]
		q := strconv.FormatUint(uint64(n), 10) + sx.suffix
		want := new(big.Rat).Mul(sx.num, new(big.Rat).SetInt64(int64(n)))
		ceil := new(big.Int).Div(new(big.Int).Add(want.Num(), new(big.Int).Sub(want.Denom(), big.NewInt(1))), want.Denom())
		got, err := ParseMemory(q)
		switch {
		case !ceil.IsInt64() || ceil.Int64() == math.MaxInt64:
			if err == nil {
				t.Fatalf("ParseMemory(%q) = %d, want an error: too large", q, got)
			}
		case err != nil:
			t.Fatalf("ParseMemory(%q): %v", q, err)
		case got != ceil.Int64():
			t.Fatalf("ParseMemory(%q) = %d, want %d", q, got, ceil)
		}
	})
}

// ceilDiv is a/b rounded up, for a ≥ 0 and b > 0, without overflow.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// FuzzFastQuantity: where the integer fast path answers, the exact parser
// gives the same value; where it declines, the exact parser decides.
func FuzzFastQuantity(f *testing.F) {
	for _, s := range []string{"64Mi", "250m", "2", "1G", "0", "007Ki", "7Ei", "8Ei", "9223372036854775807", "999999999999999999E", "1m", "999m", "Mi", "m", "1.5Gi", "1e3", "+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, milli := range []bool{false, true} {
			fast, ok := fastQuantity(s, milli)
			if !ok {
				continue
			}
			r, err := parseQuantity(s)
			if err != nil {
				t.Fatalf("fastQuantity(%q, %v) = %d, the exact parser refuses it: %v", s, milli, fast, err)
			}
			if milli {
				r.Mul(r, big.NewRat(1000, 1))
			}
			exact, err := ceilInt64(r, s)
			if err != nil || exact != fast {
				t.Fatalf("fastQuantity(%q, %v) = %d, the exact parser %d, %v", s, milli, fast, exact, err)
			}
		}
	})
}

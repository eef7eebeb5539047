package schema

import "testing"

func TestParseMemory(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"64Mi", 64 << 20, true},
		{"1Gi", 1 << 30, true},
		{"1G", 1e9, true},
		{"128974848", 128974848, true},
		{"129e6", 129e6, true},
		{"1.5Gi", 3 << 29, true},
		{"0.5Ki", 512, true},
		{"1k", 1000, true},
		{"+1Mi", 1 << 20, true},
		{"-1Mi", 0, false},
		{"", 0, false},
		{"Mi", 0, false},
		{"1.2.3Mi", 0, false},
		{"12XB", 0, false},
		{"1e", 0, false},
		{"1e99", 0, false},
		{"9999999999Ei", 0, false},
		{"1 Mi", 0, false},
		{"0x10", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseMemory(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseMemory(%q) error = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if tt.ok && got != tt.want {
			t.Errorf("ParseMemory(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestParseCPU(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"500m", 500, true},
		{"1", 1000, true},
		{"1.5", 1500, true},
		{"0.1", 100, true},
		{"2", 2000, true},
		{"100u", 0, false},
		{"-1", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseCPU(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseCPU(%q) error = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if tt.ok && got != tt.want {
			t.Errorf("ParseCPU(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func FuzzParseMemory(f *testing.F) {
	for _, s := range []string{"64Mi", "1.5Gi", "1e3", "500m", "-1", "1e-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseMemory(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseMemory(%q) = %d: negative", s, n)
		}
	})
}

package controllerutil

import "testing"

func TestParseLimit(t *testing.T) {
	cases := []struct {
		in    string
		total int
		want  int
		err   bool
	}{
		{"45%", 100, 45, false},
		{"45%", 10, 4, false},
		{"0%", 10, 0, false},
		{"3", 10, 3, false},
		{"150%", 10, 0, true},
		{"-1", 10, 0, true},
		{"lots", 10, 0, true},
	}
	for _, tc := range cases {
		got, err := ParseLimit(tc.in, tc.total)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseLimit(%q, %d) = %d, %v", tc.in, tc.total, got, err)
		}
	}
}

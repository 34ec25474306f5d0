package benchenv

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRefusesMalformedValues(t *testing.T) {
	for _, tc := range []struct{ value, wantErr string }{
		{"", ""}, {" 20 ", ""}, {"2O", `BENCH_TRIALS="2O": want a positive integer (default 5)`},
		{"0", "want a positive integer"}, {"-3", "want a positive integer"}, {"1e3", "want a positive integer"},
	} {
		v, err := parseInt("BENCH_TRIALS", tc.value, 5)
		if tc.wantErr == "" && (err != nil || v <= 0) || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("parseInt(%q) = %d, %v; want error %q", tc.value, v, err, tc.wantErr)
		}
	}
	if v, err := parseInt("BENCH_TRIALS", "", 5); v != 5 || err != nil {
		t.Errorf("unset: %d, %v; want the default 5", v, err)
	}
	for _, tc := range []struct{ value, wantErr string }{
		{"", ""}, {"90s", ""}, {"90", "want a positive duration"}, {"-1s", "want a positive duration"}, {"0s", "want a positive duration"},
	} {
		_, err := parseDuration("BENCH_WINDOW", tc.value, time.Minute)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("parseDuration(%q): %v; want error %q", tc.value, err, tc.wantErr)
		}
	}
	for value, want := range map[string]bool{"": false, "1": true, "true": true, "0": false} {
		if got, err := parseBool("BENCH_SATURATE", value); err != nil || got != want {
			t.Errorf("parseBool(%q) = %v, %v; want %v", value, got, err, want)
		}
	}
	if _, err := parseBool("BENCH_SATURATE", "yes"); err == nil || !strings.Contains(err.Error(), `BENCH_SATURATE="yes": want 1 or 0`) {
		t.Errorf("parseBool(yes): %v", err)
	}
	all := []string{"plain", "spread"}
	if got, err := parseList("BENCH_WORKLOADS", "spread, plain,spread", all); err != nil || !slices.Equal(got, []string{"spread", "plain"}) {
		t.Errorf("list: %v, %v", got, err)
	}
	if _, err := parseList("BENCH_WORKLOADS", "plain,sprad", all); err == nil || !strings.Contains(err.Error(), `"sprad" is not one of plain, spread`) {
		t.Errorf("list with a typo: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "20", "2O", "-1", "90s", "plain,spread", " , "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := parseInt("BENCH_X", s, 7); err == nil && v <= 0 {
			t.Errorf("parseInt(%q) = %d without an error", s, v)
		}
		if v, err := parseDuration("BENCH_X", s, time.Second); err == nil && v <= 0 {
			t.Errorf("parseDuration(%q) = %v without an error", s, v)
		}
		if v, err := parseList("BENCH_X", s, []string{"a", "b"}); err == nil {
			for _, item := range v {
				if item != "a" && item != "b" {
					t.Errorf("parseList(%q) = %v", s, v)
				}
			}
		}
	})
}

func TestCheckNamesRefusesUnknownVariables(t *testing.T) {
	if err := CheckNames([]string{"HOME=/root", "BENCH_NODES=1000", "BENCH_SATURATE=1", "GOBENCH_X=1"}); err != nil {
		t.Errorf("known names: %v", err)
	}
	err := CheckNames([]string{"BENCH_NODE=5000", "BENCH_TRIALS=3", "BENCH_SATURATED=1"})
	if err == nil || !strings.HasPrefix(err.Error(), "BENCH_NODE, BENCH_SATURATED: no benchmark reads it") {
		t.Errorf("misspelt names: %v", err)
	}
}

// Names is every BENCH_* name test/bench's sources read, and no other.
func TestNamesAreThoseRead(t *testing.T) {
	files, err := filepath.Glob("../../test/bench/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("test/bench sources: %v, %v", files, err)
	}
	read := map[string]bool{}
	quoted := regexp.MustCompile(`"(BENCH_[A-Z_]+)"`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range quoted.FindAllStringSubmatch(string(data), -1) {
			read[m[1]] = true
		}
	}
	for name := range read {
		if !slices.Contains(Names, name) {
			t.Errorf("test/bench reads %s, which Names lacks", name)
		}
	}
	for _, name := range Names {
		if !read[name] {
			t.Errorf("Names has %s, which test/bench does not read", name)
		}
	}
}

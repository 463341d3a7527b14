package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		"/plain":            "/plain",
		`/with\040space`:    "/with space",
		`/tab\011and\134bs`: "/tab\tand\\bs",
		`/not\9escape`:      `/not\9escape`,
		`/short\04`:         `/short\04`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

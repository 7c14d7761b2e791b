package oauth

import "testing"

func TestUserID(t *testing.T) {
	for _, tc := range []struct{ claim, want string }{
		{"alice@example.com", "alice_example_com"},
		{"auth0|5f7c8ec7c33c6c004bbafe82", "auth0_5f7c8ec7c33c6c004bbafe82"},
		{"Bob-Smith_2", "Bob-Smith_2"},
		{"", ""},
		{"é", "__"}, // two bytes of UTF-8
	} {
		if got := userID(tc.claim); got != tc.want {
			t.Errorf("userID(%q) = %q, want %q", tc.claim, got, tc.want)
		}
	}
	if got := userID(string(make([]byte, 300))); len(got) != 128 {
		t.Errorf("a 300-byte claim gives %d bytes, want 128", len(got))
	}
}

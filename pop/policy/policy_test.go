package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestKeyIDHidesKey(t *testing.T) {
	id := KeyID("demo-pro-key")
	if len(id) != 24 || strings.Contains(id, "demo") || id != KeyID("demo-pro-key") || id == KeyID("demo-pro-kez") {
		t.Errorf("KeyID = %q", id)
	}
	if KeyID("") != "" {
		t.Error("KeyID of empty key is not empty")
	}
}

func TestClientNet(t *testing.T) {
	f := &File{}
	for in, want := range map[string]string{
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::",
		"192.0.2.77":           "192.0.2.77",
	} {
		if got := f.ClientNet(netip.MustParseAddr(in)); got.String() != want {
			t.Errorf("ClientNet(%s) = %s, want %s", in, got, want)
		}
	}
	if f.ClientNet(netip.Addr{}).IsValid() {
		t.Error("zero address became valid")
	}
}

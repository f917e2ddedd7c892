package main

import "testing"

// A proxy following a gateway with no kept version says it waits for the
// gateway's policy (it applies one moments later), not that it has no
// valid policy; a file-mode proxy without a valid file still says that.
func TestProxyBannerPolicy(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{versionOrWaiting(""), "waiting for the gateway's policy (denying until it arrives)"},
		{versionOrWaiting("3"), "3"},
		{versionOrNone(""), "no valid policy: denying everything"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

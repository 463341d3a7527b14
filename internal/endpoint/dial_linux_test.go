package endpoint

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/strangertest"
)

// strangerUID is the other local user who plants.
const strangerUID = strangertest.UID

func TestMain(m *testing.M) { strangertest.Main(m) }

// TestDialOnlyToThisUsersEndpoint: another local user who can write
// where the endpoints' directory goes (a runbox home in a shared
// directory) makes that directory first, or finds it loosened, and
// listens at a sandbox's endpoint socket (random home, random sandbox id)
// before the endpoint starts; or plants the endpoint's log as a link to a
// root-only file at a random path. The CLI's dial (as the front reaches
// an ssh or kubernetes sandbox: endpoint.Dial, then the secret's
// handshake) must not give the squatter the secret, and the CLI must
// write nothing through the link. Before: the front connected to the
// squatter's socket, which read the secret; its hand-over note went
// through the planted link into the root-only file.
func TestDialOnlyToThisUsersEndpoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the squatter as another user")
	}
	for _, tc := range []struct {
		name string
		// theirs: the stranger makes the endpoints' directory;
		// otherwise it is this user's, loosened to 0777.
		theirs bool
	}{{"their directory", true}, {"our loosened directory", false}} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 {
				home := strangertest.SharedHome(t)
				id := strangertest.RandomHex(12)
				if !tc.theirs {
					if err := os.Mkdir(Dir(home), 0o700); err != nil {
						t.Fatal(err)
					}
					if err := os.Chmod(Dir(home), 0o777); err != nil {
						t.Fatal(err)
					}
				}
				sock, err := Socket(home, "ssh", id)
				if err != nil {
					t.Fatal(err)
				}
				squatter := strangertest.Squat(t, sock)
				secret, err := daemonauth.NewSecret()
				if err != nil {
					t.Fatal(err)
				}
				target := Target{Home: home, Provider: "ssh", ID: id, Full: "/nonexistent/" + strangertest.RandomHex(8)}
				dial := daemonauth.DialerWithin(func(ctx context.Context) (net.Conn, error) { return Dial(ctx, target) }, secret, time.Minute)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				conn, err := dial(ctx)
				cancel()
				if err == nil {
					conn.Close()
					t.Errorf("dialled the stranger's endpoint socket and it accepted the handshake")
				} else if !errors.Is(err, ErrNotOwn) {
					t.Errorf("dial: %v; want ErrNotOwn", err)
				}
				if b := squatter.Captured(); bytes.Contains(b, []byte(hex.EncodeToString(secret))) {
					t.Errorf("the stranger read the sandbox's secret: %q", b)
				}
			}
		})
	}
	t.Run("planted log", func(t *testing.T) {
		home := strangertest.SharedHome(t)
		id := strangertest.RandomHex(12)
		// The stranger makes the directory and links the log to a
		// root-only file at a random path.
		vault := filepath.Join(t.TempDir(), strangertest.RandomHex(9))
		if err := os.Mkdir(vault, 0o700); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(vault, strangertest.RandomHex(11))
		if err := os.WriteFile(target, []byte("root only\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(Dir(home), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(Dir(home), 0o777); err != nil {
			t.Fatal(err)
		}
		log := logPath(home, "ssh", id)
		if err := os.Symlink(target, log); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{Dir(home), log} {
			if err := os.Lchown(p, strangerUID, strangerUID); err != nil {
				t.Fatal(err)
			}
		}
		tg := Target{Home: home, Provider: "ssh", ID: id, Full: "/nonexistent/" + strangertest.RandomHex(8)}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := Dial(ctx, tg)
		cancel()
		if err == nil {
			t.Fatal("dial through a planted directory succeeded")
		}
		LogHandOver(tg, err) // as the front does
		if b, _ := os.ReadFile(target); string(b) != "root only\n" {
			t.Errorf("the root-only file behind the planted log link now holds %q", b)
		}
	})
}

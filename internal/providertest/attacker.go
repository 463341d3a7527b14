package providertest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/runbox/runbox/client"
)

// attackerEnv, set to "1" in a test binary's environment, makes Main act as
// an attacker inside a sandbox instead of running tests: with arguments
// SOCKET MARKER, it connects to the runboxd socket at SOCKET holding no
// secret and tries to make that daemon create the file MARKER, first
// through the real client, then on a raw connection. It reports each
// outcome on one line of stdout ("exec: ...", "raw: ...") and exits 0: the
// case that ran it decides what the outcome means.
const attackerEnv = "RUNBOX_PROVIDERTEST_ATTACKER"

// attackBound bounds each attempt, so an attack a daemon ignores ends.
const attackBound = 20 * time.Second

// attackerMain runs the attacker when attackerEnv asks for it, and reports
// whether it did.
func attackerMain() bool {
	if os.Getenv(attackerEnv) != "1" {
		return false
	}
	if len(os.Args) != 3 {
		fmt.Fprintf(os.Stderr, "attacker: want SOCKET MARKER, got %q\n", os.Args[1:])
		os.Exit(2)
	}
	socket, marker := os.Args[1], os.Args[2]

	ctx, cancel := context.WithTimeout(context.Background(), attackBound)
	c := client.DialUnix(socket)
	res, err := c.ExecArgv(ctx, []string{"touch", marker})
	c.Close()
	cancel()
	if err != nil {
		fmt.Printf("exec: error: %s\n", oneLine(err.Error()))
	} else {
		fmt.Printf("exec: ran: exit %d\n", res.ExitCode)
	}

	// What the daemon says to a peer that starts talking HTTP/2 at once.
	conn, err := net.DialTimeout("unix", socket, attackBound)
	if err != nil {
		fmt.Printf("raw: dial: %s\n", oneLine(err.Error()))
		return true
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(attackBound))
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		fmt.Printf("raw: write: %s\n", oneLine(err.Error()))
		return true
	}
	b, err := io.ReadAll(io.LimitReader(conn, 512))
	fmt.Printf("raw: read %q (%v)\n", b, err)
	return true
}

// oneLine joins s's lines, so each report stays on one line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " | ") }

package procbox

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/runbox/runbox"
)

func TestMatch(t *testing.T) {
	recs := []Record{{ID: "abc111", Name: "one"}, {ID: "abc222", Name: "abc111x"}, {ID: "def333", Name: "abc"}}
	for key, want := range map[string]string{
		"abc111":  "abc111",
		"abc111x": "abc222", // an exact name
		"abc":     "def333", // a name beats an id prefix
		"abc2":    "abc222",
		"d":       "def333",
	} {
		got, err := match(recs, key)
		if err != nil || got.ID != want {
			t.Errorf("match(%q) = %s, %v; want %s", key, got.ID, err, want)
		}
	}
	if _, err := match(recs, "ab"); !errors.Is(err, runbox.ErrSandboxNotFound) || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("match(ab) err = %v; want an ambiguous ErrSandboxNotFound", err)
	}
	for _, key := range []string{"", "x", "abc1111"} {
		if _, err := match(recs, key); !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("match(%q) err = %v; want ErrSandboxNotFound", key, err)
		}
	}
}

// A recorded pid that now belongs to another process (different start
// time) is not the sandbox's runboxd.
func TestProcAliveGuardsPidReuse(t *testing.T) {
	start, err := procStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	me := Record{Pid: os.Getpid(), StartTime: start, BootID: bootID()}
	if !procAlive(me) {
		t.Fatal("procAlive(this process) = false")
	}
	reused := me
	reused.StartTime++
	if procAlive(reused) {
		t.Error("procAlive with another start time = true")
	}
	rebooted := me
	rebooted.BootID = "another-boot"
	if procAlive(rebooted) {
		t.Error("procAlive with another boot id = true")
	}
	if procAlive(Record{}) {
		t.Error("procAlive(pid 0) = true")
	}
}

package procbox

import (
	"os"
	"testing"

	"github.com/runbox/runbox/internal/processrecord"
)

// A recorded pid that now belongs to another process (different start
// time) is not the sandbox's runboxd.
func TestProcAliveGuardsPidReuse(t *testing.T) {
	start, err := procStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	me := Record{Pid: os.Getpid(), StartTime: start, BootID: processrecord.BootID()}
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

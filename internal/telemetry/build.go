package telemetry

import (
	"runtime"
	"runtime/debug"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// version is the release version, set at link time:
//
//	go build -ldflags "-X github.com/fencegate/fencegate/internal/telemetry.version=v1.2.3" ./cmd/fencegate
//
// Empty: the module version from the build information, "devel" for a
// build from a work tree.
var version string

// BuildInfo says which binary runs. `fencegate --version` prints it and
// fencegate_build_info exports it, from this one place.
type BuildInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	GoVersion  string `json:"go_version"`
	Librdkafka string `json:"librdkafka_version"`
}

// Build reads the build information of the running binary. The commit is
// the VCS revision Go stamps into binaries built from a git work tree
// ("-dirty" when it had local changes), "unknown" otherwise (go test, go
// run).
func Build() BuildInfo {
	b := BuildInfo{Version: version, Commit: "unknown", GoVersion: runtime.Version()}
	_, b.Librdkafka = kafka.LibraryVersion()
	info, ok := debug.ReadBuildInfo()
	if ok {
		if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && b.Commit != "unknown" {
			b.Commit += "-dirty"
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

package tunnel

// Version is plug's version, stamped by build.sh with
// -ldflags "-X plug/tunnel.Version=...": the release tag vX.Y.Z on the
// commit, else the commit's short hash. The agent announces it in its SSH
// version string and its welcome; the CLI sends it in its hello.
var Version = "dev"

// Commit and BuildTime are the commit plug was built from (its hash, with
// "-dirty" when the tree had uncommitted changes) and that commit's time
// (RFC 3339, UTC), stamped by build.sh like Version; empty in a plain go
// build. The build time is the commit's so that two builds of one commit
// are the same file.
var Commit, BuildTime string

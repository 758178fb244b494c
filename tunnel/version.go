package tunnel

// Version is plug's version, stamped by build.sh with
// -ldflags "-X plug/tunnel.Version=...". The agent announces it in its SSH
// version string and its welcome; the CLI sends it in its hello.
var Version = "dev"

package localnames

// SetupHow is how plug setup, which prepares this machine for the names
// once, is run here.
const SetupHow = "sudo plug setup"

// HostsPath is the machine's hosts file.
const HostsPath = "/etc/hosts"

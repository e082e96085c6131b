package materializer

// DeniedRecheck is how often Run asks the cluster again while refused,
// for the tests that watch readiness stay false across rechecks.
const DeniedRecheck = deniedRecheck

//go:build race

package gateway_test

// raceScale widens timing budgets under -race, whose instrumentation slows
// byte loops (reading a large body) more than a small request's work.
const raceScale = 4

//go:build !race

package gateway_test

// raceScale widens timing budgets under -race (race_test.go).
const raceScale = 1

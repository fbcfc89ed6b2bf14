// Package stats holds the statistics behind abtest's gate 3 (interleaved A/B with a paired sign
// test, see GATES.md) and behind `abtest compare`. Everything here is a pure function over plain
// []float64 slices: no I/O, no globals, deterministic for a given seed.
//
// Which gate uses what, and why:
//
//   - Gate 3, per metric (pp / tg tok/s), on PAIRS = 9 interleaved rounds:
//     Ratios turns the two arms into paired per-round ratios r_i = B_i / A_i. Pairing cancels the
//     slow drift of clocks and thermals that hits both arms of one round alike.
//     NotSlower is the seed's refusal rule: count rounds where B is slower than A by more than the
//     bar and refuse at RefuseAt (7 of 9, one-sided p = 46/512). ImprovementClaim is the speedup
//     claim: median ratio over the pre-registered bar AND exact one-sided sign-test p <= 0.05
//     (8 of 9 wins); Separated gives the "SEP" line. Both rest on SignTest, an exact binomial
//     sign test: it is distribution-free (no normality assumed for tok/s, which is skewed and
//     bimodal under clock changes) and robust to one noisy round, which can flip one sign but
//     cannot drag a mean.
//     MedianCI is the reported distribution-free 95% CI of the median ratio (order statistics),
//     with the coverage actually achieved (0.9609375 for n = 9), since with 9 rounds no pair of
//     order statistics gives exactly 95%.
//     WilcoxonSignedRank (on log ratios) and BootstrapMedianCI are secondary evidence printed
//     next to the verdict; they do not decide it.
//     MADOutliers flags suspicious rounds in the report; it never drops them (dropping rounds
//     after the fact would invalidate the pre-registered n = 9).
//     Summary gives the per-arm descriptive line (min, max, mean, median, stddev, CV).
//   - `abtest compare BASE.json HEAD.json`: CompareMedians compares two independent samples of one
//     metric (no pairing across the two runs) by the ratio of medians, a seeded two-sample
//     bootstrap CI and a Mann-Whitney U p-value, in the style of benchstat.
//   - `abtest history` (the nightly history): ChangePoints finds where a lever's per-night B/A
//     ratios changed, by E-divisive means over nights (NightDistances: every round counts) with a
//     seeded permutation test at ChangeAlpha, a magnitude floor, and no verdict before
//     ChangeMinNights nights stand on each side (changepoint.go says why each choice).
//
// Conventions: metrics are higher-is-better (tok/s); for a time, pass reciprocals. Invalid input
// (empty, non-finite, out of range) never panics: bare float64 results are NaN, NotSlower and
// ImprovementClaim fail closed (Pass/Claim false, with the reason), CompareMedians answers
// Verdict "?", Summary answers N = 0. NaN does not encode as JSON: check before writing reports.
package stats

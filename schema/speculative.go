package schema

// Speculative is what speculative decoding did (--draft): in a bench tg
// test over all its repetitions, in a generate document over the run.
// Absent without --draft.
type Speculative struct {
	// Draft is the drafter: "lookup", "none" (plain decoding through the
	// same loop, the baseline) or the draft model's file; K the tokens
	// drafted per step.
	Draft string `json:"draft"`
	K     int    `json:"k"`
	// Drafted are the tokens proposed and checked, Accepted those the
	// target agreed with; AcceptanceRate is Accepted / Drafted.
	Drafted        int     `json:"drafted"`
	Accepted       int     `json:"accepted"`
	AcceptanceRate float64 `json:"acceptance_rate"`
	// TargetForwards are the target's decode forwards (one verify forward
	// per step); TokensPerForward the tokens emitted per forward (1 for
	// plain decoding).
	TargetForwards   int     `json:"target_forwards"`
	TokensPerForward float64 `json:"tokens_per_forward"`
}

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/session"
	"github.com/minfer-go/minfer/schema"
)

// sessionLM is what a command needs of an engine to save and restore its
// context (model.Engine).
type sessionLM interface {
	LoadSession(path string) (model.Session, error)
	SaveSession(path string, s model.Session) error
	// Tokens are the ids whose KV cells the engine holds.
	Tokens() []int32
	// SessionSupport is nil when the engine's backend can save and
	// restore, else why not.
	SessionSupport() error
}

// sessionFlags are --session and --session-readonly, for every command that
// runs a conversation (generate; chat when it comes).
type sessionFlags struct {
	path     string
	readonly bool

	restore bool // path exists: restore it before the prompt
}

func (s *sessionFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.path, "session", "", "saved session FILE: restore the context from it when it exists (the prompt is appended to it), save the whole context to it after generating")
	cmd.Flags().BoolVar(&s.readonly, "session-readonly", false, "restore --session FILE but never write it (every run starts from the same saved context)")
}

// prepare checks the flags before the model is loaded and reads the header
// of an existing session file: unless --ctx was given, the model is loaded
// with the session's context length. A file that is not a session, or of a
// newer format, is refused here (exit 2).
func (s *sessionFlags) prepare(cmd *cobra.Command, ctx *int) error {
	if s.path == "" {
		if s.readonly {
			return usagef("--session-readonly needs --session FILE")
		}
		return nil
	}
	_, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if s.readonly {
			return usagef("--session-readonly: %s does not exist", s.path)
		}
		return nil
	case err != nil:
		return fmt.Errorf("session: %w", err)
	}
	h, err := session.Peek(s.path)
	if err != nil {
		return sessionErr(err)
	}
	if !cmd.Flags().Changed("ctx") {
		*ctx = h.NCtx
	}
	s.restore = true
	return nil
}

// sessionErr makes a refused session file a usage error (exit 2): the file
// given cannot be used with this model and these settings. I/O errors stay
// exit 1.
func sessionErr(err error) error {
	if errors.Is(err, session.ErrRefused) {
		return usageError{err}
	}
	return err
}

// sessionRun is a conversation's state after the restore: the context in
// the KV cache, the tokens to forward before the prompt, and what is
// reported.
type sessionRun struct {
	e       sessionLM
	past    []int32 // the restored context (in the KV cache)
	pending []int32 // restored tokens never forwarded: forwarded first
	doc     *schema.GenerateSession
}

// open restores the session into e when the file exists. The generator
// continues from the saved state unless --seed names another seed than
// the session's (so the same command line continues the same draw); the
// sampling parameters are this run's flags.
func (s *sessionFlags) open(cmd *cobra.Command, e lm, smp *sample.Sampler) (*sessionRun, error) {
	if s.path == "" {
		return nil, nil
	}
	se, ok := e.(sessionLM)
	if !ok {
		return nil, errors.New("--session: this engine cannot save or restore sessions")
	}
	if err := se.SessionSupport(); err != nil {
		return nil, err // before anything is generated that could not be saved
	}
	r := &sessionRun{e: se, doc: &schema.GenerateSession{Path: s.path}}
	if !s.restore {
		return r, nil
	}
	t0 := time.Now()
	saved, err := se.LoadSession(s.path)
	r.doc.RestoreMS = ms(time.Since(t0))
	if err != nil {
		return nil, sessionErr(err)
	}
	r.past, r.pending = se.Tokens(), saved.Pending
	r.doc.RestoredTokens = len(r.past) + len(r.pending)
	if saved.Sampler != nil && !(cmd.Flags().Changed("seed") && smp.Params().Seed != saved.Sampler.Params.Seed) {
		smp.SetRNG(saved.Sampler.RNG)
	}
	return r, nil
}

// save writes the context back (not with --session-readonly): the cached
// tokens, the last sampled token as pending (it was never forwarded; it is
// dropped when the context is full, as no run could forward it), and the
// sampler. A failed save leaves the file as it was.
func (s *sessionFlags) save(r *sessionRun, gen []int32, nCtx int, sp sample.Params, smp *sample.Sampler) error {
	if r == nil || s.readonly {
		return nil
	}
	var pending []int32
	if len(gen) > 0 && len(r.e.Tokens()) < nCtx {
		pending = gen[len(gen)-1:]
	}
	t0 := time.Now()
	err := r.e.SaveSession(s.path, model.Session{Pending: pending, Sampler: &session.Sampler{Params: sp, RNG: smp.RNG()}})
	r.doc.SaveMS = ms(time.Since(t0))
	r.doc.SavedTokens = len(r.e.Tokens()) + len(pending)
	return err
}

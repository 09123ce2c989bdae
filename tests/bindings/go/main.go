// Command binding-test tests the Go binding; run by ctest. Same modes as the other languages'
// binding tests (see tests/bindings/python/binding_test.py):
//
//	binding-test test MODEL WORKDIR SHIPPED | memory MODEL | save MODEL STATE OUT |
//	restore MODEL STATE OUT | engine MODEL | engine-memory MODEL |
//	engine-exit MODEL open|closed return|exit (engine.go)
//
// SHIPPED is the shipped model (a context of 256 tokens), for inputs longer than the context.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	"photon.sdk/photon"
)

const (
	prompt    = "In the beginning God created the heaven and the earth."
	warmup    = 20
	loops     = 200
	lateLoops = 100
	// RSS growth allowed over the loops, far below a leak's: a model kept alive holds ~30 MB.
	closedBoundMB = 64
	lateBoundMB   = 128
)

var sampling = photon.SessionOptions{Temperature: 0.8, Seed: 42}

// Prompts of different lengths for the batched prefill.
var batchPrompts = []string{prompt, "And the earth was without form.", "Let there be light."}

func check(condition bool, format string, args ...interface{}) {
	if !condition {
		panic(fmt.Sprintf("check failed: "+format, args...))
	}
}

func must[T any](value T, err error) T {
	if err != nil {
		panic(err)
	}
	return value
}

func prompted(model *photon.Model) *photon.Session {
	session := must(model.NewSession(&sampling))
	check(session.PrefillText(prompt) == nil, "prefill")
	return session
}

func expectError(err error, what string, statusNames ...string) *photon.Error {
	var photonErr *photon.Error
	check(errors.As(err, &photonErr), "%s: expected a *photon.Error, got %v", what, err)
	for _, name := range statusNames {
		if photonErr.StatusName == name {
			check(photonErr.Status > 0 && photonErr.Message != "", "%s: %+v", what, photonErr)
			return photonErr
		}
	}
	panic(fmt.Sprintf("%s: expected %v, got %s: %s", what, statusNames, photonErr.StatusName, err))
}

func ids(tokens []photon.Token) []int32 {
	result := make([]int32, len(tokens))
	for i, token := range tokens {
		result[i] = token.ID
	}
	return result
}

func pull(session *photon.Session, n int) []photon.Token {
	var tokens []photon.Token
	it := session.Tokens(n)
	for it.Next() {
		tokens = append(tokens, it.Token())
	}
	check(it.Err() == nil, "iteration: %v", it.Err())
	return tokens
}

func testModel(model *photon.Model) {
	check(model.VocabSize() > 0 && (model.Arch() == "photon" || model.Arch() == "vanilla"),
		"model properties")
	check(strings.Contains(model.ConfigJSON(), `"vocab_size"`), "config")
	check(model.Device() == "cpu", "device "+model.Device())
	tokens := must(model.Tokenize(prompt, true))
	check(int(tokens[0]) == model.BOS() && must(model.Detokenize(tokens)) == prompt,
		"tokenize round trip")
	check(strings.Count(photon.Version(), ".") == 2, "version")
}

func testStreaming(model *photon.Model) {
	pushed, pulled := prompted(model), prompted(model)
	defer pushed.Close()
	defer pulled.Close()
	var received []photon.Token
	n, err := pushed.Generate(12, func(token photon.Token) error {
		received = append(received, token)
		return nil
	})
	check(n == 12 && err == nil, "Generate's count: %d, %v", n, err)
	check(pushed.StopReason() == photon.StopLength, "stop: %v", pushed.StopReason())
	streamed := pull(pulled, 12)
	check(reflect.DeepEqual(ids(received), ids(streamed)), "callback and iterator tokens")
	check(reflect.DeepEqual(must(pushed.History()), must(pulled.History())), "same history")
	var text strings.Builder
	for _, token := range received {
		text.WriteString(token.Piece)
		check(token.Logprob <= 0, "log probability")
	}
	check(must(model.Detokenize(must(pushed.History()))) == prompt+text.String(), "pieces")
	check(len(pull(pulled, 0)) == 0, "an empty budget")
}

func testCancel(model *photon.Model) {
	session := prompted(model)
	defer session.Close()
	start := session.Position()
	seen := 0
	n, err := session.Generate(10, func(photon.Token) error {
		if seen++; seen == 3 {
			return photon.ErrStop
		}
		return nil
	})
	check(n == 3 && err == nil && session.StopReason() == photon.StopCallback,
		"ErrStop stops: %d, %v, %v", n, err, session.StopReason())
	check(session.Position() == start+3, "the stopping token is kept")
	n, err = session.Generate(10, func(photon.Token) error {
		session.Cancel()
		return nil
	})
	check(err == nil && session.StopReason() == photon.StopCancelled && n >= 1 && n < 10,
		"Cancel from the callback: %d, %v", n, session.StopReason())
}

// testCancelIterator: Cancel from another goroutine ends a pull loop (Tokens) at its next pull,
// with StopCancelled. The loop waits at its third token until the other goroutine has cancelled,
// so that the request lands inside the loop however the goroutines are scheduled; every wait is
// bounded. A Cancel made before a loop ends it at its first pull, and pulling again resumes.
func testCancelIterator(model *photon.Model) {
	endless := &photon.SessionOptions{IgnoreEOS: true}
	session, alone := must(model.NewSession(endless)), must(model.NewSession(endless))
	defer session.Close()
	defer alone.Close()
	check(session.PrefillText(prompt) == nil && alone.PrefillText(prompt) == nil, "prefill")
	var expected []int32
	for _, token := range pull(alone, 8) {
		expected = append(expected, token.ID)
	}
	third, cancelled := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-third:
			session.Cancel()
		case <-time.After(time.Minute):
		}
		close(cancelled)
	}()
	var pulled []int32
	it := session.Tokens(200) // a budget the cancellation must cut short
	for it.Next() {
		pulled = append(pulled, it.Token().ID)
		if len(pulled) == 3 {
			close(third)
			select {
			case <-cancelled:
			case <-time.After(time.Minute):
				check(false, "the other goroutine did not cancel within a minute")
			}
		}
	}
	check(it.Err() == nil, "iteration: %v", it.Err())
	if len(pulled) < 3 { // the loop ended early: let the goroutine go
		close(third)
	}
	<-cancelled
	check(reflect.DeepEqual(pulled, expected[:3]) && session.StopReason() == photon.StopCancelled,
		"Cancel from another goroutine ends the loop: %d tokens, %v", len(pulled),
		session.StopReason())
	session.Cancel()
	check(len(pull(session, 5)) == 0 && session.StopReason() == photon.StopCancelled,
		"a Cancel before a loop ends it at its first pull")
	var resumed []int32
	for _, token := range pull(session, 5) {
		resumed = append(resumed, token.ID)
	}
	check(reflect.DeepEqual(resumed, expected[3:8]), "pulling again resumes: %v", resumed)
}

var errCallback = errors.New("stop here")

func testCallbackErrors(model *photon.Model) {
	session := prompted(model)
	defer session.Close()
	start := session.Position()
	seen := 0
	n, err := session.Generate(10, func(photon.Token) error {
		if seen++; seen == 2 {
			return fmt.Errorf("callback: %w", errCallback)
		}
		return nil
	})
	check(errors.Is(err, errCallback) && n == 2, "the callback's error is returned: %d, %v", n, err)
	check(session.Position() == start+2 && session.StopReason() == photon.StopCallback,
		"generation stopped at the error")

	recovered := func() (value interface{}) {
		defer func() { value = recover() }()
		_, _ = session.Generate(10, func(photon.Token) error { panic("callback panic") })
		return nil
	}()
	check(recovered == "callback panic", "a callback's panic reaches the caller: %v", recovered)
	check(session.Position() == start+3, "generation stopped at the panic")
	n, err = session.Generate(2, nil)
	check(n == 2 && err == nil, "the session stays usable")
}

func testBatch(model *photon.Model) {
	solo := prompted(model)
	expected := ids(pull(solo, 6))
	solo.Close()
	first, second := prompted(model), prompted(model)
	defer first.Close()
	defer second.Close()
	received := [2][]int32{}
	counts, err := photon.GenerateBatch([]*photon.Session{first, second}, 6,
		func(index int, token photon.Token) error {
			received[index] = append(received[index], token.ID)
			return nil
		})
	check(err == nil && reflect.DeepEqual(counts, []int{6, 6}) &&
		reflect.DeepEqual(received[0], expected) && reflect.DeepEqual(received[1], expected),
		"a batch gives each session its own tokens: %v %v", counts, err)
	counts, err = photon.GenerateBatch([]*photon.Session{first, second}, 4,
		func(index int, token photon.Token) error {
			if index == 0 {
				return photon.ErrStop
			}
			return nil
		})
	check(err == nil && reflect.DeepEqual(counts, []int{1, 4}) &&
		first.StopReason() == photon.StopCallback, "ErrStop stops one session: %v", counts)
	counts, err = photon.GenerateBatch([]*photon.Session{first, second}, 2, nil)
	check(err == nil && reflect.DeepEqual(counts, []int{2, 2}), "without a callback: %v", counts)
	testPrefillBatch(model)
}

// testPrefillBatch: PrefillBatch leaves each session as Prefill alone would (same position, same
// greedy tokens), and a bad token fails the batch before any session changes.
func testPrefillBatch(model *photon.Model) {
	var prompts [][]int32
	var positions []int
	var expected [][]int32
	for _, text := range batchPrompts {
		tokens := must(model.Tokenize(text, true))
		solo := must(model.NewSession(nil))
		check(solo.Prefill(tokens) == nil, "prefill alone")
		prompts = append(prompts, tokens)
		positions = append(positions, solo.Position())
		expected = append(expected, ids(pull(solo, 6)))
		solo.Close()
	}
	var sessions []*photon.Session
	for range prompts {
		session := must(model.NewSession(nil))
		defer session.Close()
		sessions = append(sessions, session)
	}
	check(photon.PrefillBatch(sessions, prompts) == nil, "PrefillBatch")
	var batched [][]int32
	for i, session := range sessions {
		check(session.Position() == positions[i], "session %d's position: %d vs %d", i,
			session.Position(), positions[i])
		batched = append(batched, ids(pull(session, 6)))
	}
	check(reflect.DeepEqual(batched, expected),
		"PrefillBatch gives each session its own tokens: %v vs %v", batched, expected)
	before := []int{}
	for _, session := range sessions {
		before = append(before, session.Position())
	}
	bad := [][]int32{{1}, {int32(model.BOS()), int32(model.VocabSize())}, {2}}
	err := expectError(photon.PrefillBatch(sessions, bad), "a token outside the vocabulary",
		"PHOTON_ERR_BAD_TOKEN")
	check(strings.Contains(err.Message, "session 1"), "the message names the session: %s", err)
	for i, session := range sessions {
		check(session.Position() == before[i], "a bad token leaves session %d unchanged", i)
	}
	expectError(photon.PrefillBatch(sessions, prompts[:2]), "fewer token lists than sessions",
		"PHOTON_ERR_INVALID_ARGUMENT")
}

// testRanges: ints the library's 32-bit parameters cannot hold are errors, never wrapped
// (1<<32 + 3 is not 3), and a failed call returns no count beside its error.
func testRanges(model *photon.Model) {
	session := prompted(model)
	defer session.Close()
	start := session.Position()
	n, err := session.Generate(1<<32+3, nil)
	check(n == 0 && strings.Contains(expectError(err, "budget over 32 bits",
		"PHOTON_ERR_INVALID_ARGUMENT").Message, "4294967299"), "1<<32+3 tokens: %d, %v", n, err)
	n, err = session.Generate(-1, nil)
	expectError(err, "negative budget", "PHOTON_ERR_INVALID_ARGUMENT")
	check(n == 0, "a failed Generate returns 0, not %d", n)
	n, err = session.Generate(-1, func(photon.Token) error { return nil })
	expectError(err, "negative budget with a callback", "PHOTON_ERR_INVALID_ARGUMENT")
	check(n == 0, "a failed Generate with a callback returns 0, not %d", n)
	counts, err := photon.GenerateBatch([]*photon.Session{session}, -1<<40, nil)
	expectError(err, "batch budget over 32 bits", "PHOTON_ERR_INVALID_ARGUMENT")
	check(counts == nil, "a failed GenerateBatch returns no counts: %v", counts)
	for _, options := range []photon.SessionOptions{
		{ContextLength: 1 << 32}, {TopK: -1<<31 - 1}, {RepetitionPenalty: 1.1, RepetitionLastN: 1 << 40},
	} {
		_, err := model.NewSession(&options)
		expectError(err, fmt.Sprintf("options %+v", options), "PHOTON_ERR_INVALID_ARGUMENT")
	}
	check(session.Position() == start, "nothing was generated")
}

// testScore: teacher forcing gives each token the log-probability that HierGen generation
// (whose logits equal teacher forcing) reported for it.
func testScore(model *photon.Model) {
	session := must(model.NewSession(&photon.SessionOptions{Mode: photon.ModeHierGen}))
	defer session.Close()
	check(session.PrefillText(prompt) == nil, "prefill")
	start := session.Position()
	var generated []photon.Token
	_, err := session.Generate(6, func(token photon.Token) error {
		generated = append(generated, token)
		return nil
	})
	check(err == nil, "generate: %v", err)
	logprobs := must(model.Score(must(session.History())))
	check(len(logprobs) == start+6 && logprobs[0] != logprobs[0], "Score's shape: %v", logprobs)
	for i, token := range generated {
		diff := float64(token.Logprob - logprobs[start+i])
		check(diff < 1e-3 && diff > -1e-3, "score %v vs generation %v", logprobs[start+i], token)
	}
	_, err = model.Score(nil)
	expectError(err, "nothing to score", "PHOTON_ERR_INVALID_ARGUMENT")
}

// testScoreTop: ScoreTop gives each token Score's log-probability and its position's k
// alternatives, the most likely first; the token's own value among them is its log-probability
// exactly; the first token has none; k outside [1, the vocabulary] is an error.
func testScoreTop(model *photon.Model) {
	session := must(model.NewSession(&photon.SessionOptions{IgnoreEOS: true})) // greedy
	check(session.PrefillText(prompt) == nil, "prefill")
	_, err := session.Generate(6, nil)
	check(err == nil, "generate: %v", err)
	ids := must(session.History())
	session.Close()
	plain := must(model.Score(ids))
	scored := must(model.ScoreTop(ids, topK))
	check(len(scored) == len(ids), "a ScoredToken per token: %d of %d", len(scored), len(ids))
	check(scored[0].ID == ids[0] && math.IsNaN(float64(scored[0].Logprob)) &&
		scored[0].TopLogprobs == nil, "the first token has no alternatives: %+v", scored[0])
	among := 0
	for i, s := range scored[1:] {
		top := s.TopLogprobs
		check(s.ID == ids[i+1] && s.Logprob == plain[i+1], "Score's log-probability: %+v vs %v",
			s, plain[i+1])
		check(len(top) == topK, "%d alternatives: %+v", topK, s)
		seen := map[int32]bool{}
		for j, alternative := range top {
			seen[alternative.ID] = true
			if j > 0 {
				previous := top[j-1]
				check(previous.Logprob > alternative.Logprob ||
					(previous.Logprob == alternative.Logprob && previous.ID < alternative.ID),
					"the most likely first: %+v", s)
			}
			if alternative.ID == s.ID {
				check(alternative.Logprob == s.Logprob, "the token's value among them: %+v", s)
				among++
			}
		}
		check(len(seen) == topK, "distinct ids: %+v", s)
	}
	check(among > 0, "the greedy tokens are among their alternatives: %+v", scored)
	for _, k := range []int{0, model.VocabSize() + 1} {
		_, err := model.ScoreTop(ids, k)
		expectError(err, fmt.Sprintf("ScoreTop with k = %d", k), "PHOTON_ERR_INVALID_ARGUMENT")
	}
	_, err = model.ScoreTop(ids, 1<<32+topK)
	wide := expectError(err, "k over 32 bits", "PHOTON_ERR_INVALID_ARGUMENT")
	check(strings.Contains(wide.Message, "4294967299"), "k = 1<<32+3 is not 3: %v", err)
	_, err = model.ScoreTop(nil, topK)
	expectError(err, "nothing to score with alternatives", "PHOTON_ERR_INVALID_ARGUMENT")
}

// testLongInputs: past the context, on the shipped model (a context of 256 tokens, its tokenizer
// beside it): scoring in sliding windows (a later window scores as its own tokens do) and the
// context shift; the embedded tokenizer, loaded with verification.
func testLongInputs(shippedPath string) {
	model := must(photon.LoadWith(shippedPath, photon.LoadOptions{Verify: true}))
	defer model.Close()
	context := model.ContextLength()
	text := strings.TrimSpace(strings.Repeat(prompt+" ", 2*context/10))
	ids := must(model.Tokenize(text, true))
	check(len(ids) > context, "%d tokens exceed the context %d", len(ids), context)
	stride := context / 3
	scored := must(model.ScoreWithStride(ids, stride))
	// Window 1 covers [stride, stride + context) and scores the tokens after window 0's end.
	end := len(ids)
	if stride+context < end {
		end = stride + context
	}
	window := must(model.Score(ids[stride:end]))
	for i := context; i < end; i++ {
		check(scored[i] == window[i-stride], "token %d: %v vs its window's %v", i, scored[i],
			window[i-stride])
	}
	first := must(model.Score(ids[:context]))
	check(reflect.DeepEqual(first[1:], must(model.Score(ids))[1:context]),
		"window 0 is the first context")
	_, err := model.ScoreWithStride(ids, context)
	expectError(err, "a stride of the whole context", "PHOTON_ERR_INVALID_ARGUMENT")
	windowed := must(model.ScoreTopWithStride(ids, 2, stride))
	for i := 1; i < len(ids); i++ {
		check(windowed[i].Logprob == scored[i] && len(windowed[i].TopLogprobs) == 2,
			"ScoreTopWithStride scores token %d as ScoreWithStride: %+v vs %v", i, windowed[i],
			scored[i])
	}

	options := sampling
	options.IgnoreEOS, options.ContextLength, options.ContextShift = true, 16, true
	session := must(model.NewSession(&options))
	defer session.Close()
	check(session.PrefillText(prompt) == nil, "prefill")
	n, err := session.Generate(40, nil)
	check(err == nil && n == 40 && session.StopReason() == photon.StopLength &&
		session.Position() <= 16, "the context shift goes on: %d, %v at %d", n,
		session.StopReason(), session.Position())

	shipped := must(os.ReadFile(filepath.Join(filepath.Dir(shippedPath), "tokenizer.model")))
	check(bytes.Equal(must(model.TokenizerModel()), shipped),
		"the embedded tokenizer is models/tokenizer.model")
}

const samplerTokens = 8

// greedyTokens: the token ids a greedy session with options generates after the prompt.
func greedyTokens(model *photon.Model, options photon.SessionOptions) []int32 {
	options.IgnoreEOS = true
	session := must(model.NewSession(&options))
	defer session.Close()
	check(session.PrefillText(prompt) == nil, "prefill")
	return ids(pull(session, samplerTokens))
}

func count(tokens []int32, token int32) int {
	n := 0
	for _, t := range tokens {
		if t == token {
			n++
		}
	}
	return n
}

func only(tokens []int32, token int32) bool {
	return len(tokens) == samplerTokens && count(tokens, token) == len(tokens)
}

// testSamplerSettings: logit biases and presence / frequency penalties reach the sampler, each
// value with its token and its penalty, in the window RepetitionLastN sets. Greedy decoding shows
// it: a bias of -100 bars the unbiased first token and one of +100 forces its token; a frequency
// penalty of -100 (a gain of 100 per occurrence) repeats the most frequent token of the window;
// presence -100 with frequency +60 favours the ids that occur once in the window (a gain of 40)
// over the others (a loss of 20 or more).
func testSamplerSettings(model *photon.Model) {
	promptIDs := must(model.Tokenize(prompt, true))
	plain := greedyTokens(model, photon.SessionOptions{})
	first, forced := plain[0], promptIDs[1]
	check(count(promptIDs, first) == 0 && forced != first,
		"the unbiased greedy run starts outside the prompt: %v", plain)
	barred := greedyTokens(model, photon.SessionOptions{LogitBias: map[int32]float32{first: -100}})
	check(barred[0] != first, "a bias of -100 bars token %d: %v", first, barred)
	paired := greedyTokens(model,
		photon.SessionOptions{LogitBias: map[int32]float32{first: -100, forced: 100}})
	check(only(paired, forced), "a bias of +100 forces token %d: %v", forced, paired)
	empty := greedyTokens(model, photon.SessionOptions{LogitBias: map[int32]float32{}})
	check(reflect.DeepEqual(empty, plain), "an empty map biases nothing: %v", empty)

	common := promptIDs[0]
	for _, token := range promptIDs {
		if count(promptIDs, token) > count(promptIDs, common) {
			common = token
		}
	}
	for _, token := range promptIDs {
		check(token == common || count(promptIDs, token) < count(promptIDs, common),
			"the prompt has one most frequent token: %v", promptIDs)
	}
	repeated := greedyTokens(model, photon.SessionOptions{FrequencyPenalty: -100})
	check(only(repeated, common), "frequency -100 repeats %d: %v", common, repeated)
	// A window of one token, without a repetition penalty: the last token is the most frequent.
	last := greedyTokens(model, photon.SessionOptions{FrequencyPenalty: -100, RepetitionLastN: 1})
	check(only(last, promptIDs[len(promptIDs)-1]), "a window of 1 repeats the last token: %v",
		last)
	mixed := greedyTokens(model, photon.SessionOptions{PresencePenalty: -100, FrequencyPenalty: 60})
	window := append(append([]int32{}, promptIDs...), mixed...)
	for i, token := range mixed {
		check(count(window[:len(promptIDs)+i], token) == 1,
			"presence -100 and frequency +60 favour the ids seen once: %v after %v", mixed, promptIDs)
	}

	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, options := range []photon.SessionOptions{
		{LogitBias: map[int32]float32{first: nan}}, {LogitBias: map[int32]float32{-1: 1}},
		{PresencePenalty: inf}, {FrequencyPenalty: nan},
	} {
		_, err := model.NewSession(&options)
		expectError(err, fmt.Sprintf("options %+v", options), "PHOTON_ERR_INVALID_ARGUMENT")
	}
	outside := photon.SessionOptions{LogitBias: map[int32]float32{int32(model.VocabSize()): 1}}
	_, err := model.NewSession(&outside)
	expectError(err, "a biased token outside the vocabulary", "PHOTON_ERR_BAD_TOKEN")
}

const topK = 3

// checkAlternatives: each token holds k alternatives of distinct ids, the most likely first (the
// lower id first on ties); greedy decoding drew the first one, whose log-probability is the
// token's own (to float rounding).
func checkAlternatives(tokens []photon.Token, k int, what string) {
	check(len(tokens) == samplerTokens, "%s: %d tokens", what, len(tokens))
	for _, token := range tokens {
		top := token.TopLogprobs
		check(len(top) == k, "%s: %d alternatives: %+v", what, k, token)
		if k == 0 {
			check(top == nil, "%s: no alternatives: %+v", what, token)
			continue
		}
		check(top[0].ID == token.ID && math.Abs(float64(top[0].Logprob-token.Logprob)) <= 1e-5,
			"%s: the greedy token is the first alternative: %+v", what, token)
		seen := map[int32]bool{}
		for i, alternative := range top {
			check(!seen[alternative.ID] && alternative.Logprob <= 0,
				"%s: distinct ids, log-probabilities: %+v", what, token)
			seen[alternative.ID] = true
			if i > 0 {
				a := top[i-1]
				check(a.Logprob > alternative.Logprob ||
					(a.Logprob == alternative.Logprob && a.ID < alternative.ID),
					"%s: the most likely first: %+v", what, token)
			}
		}
	}
}

// greedyRun: the tokens a greedy session with options generates after the prompt, pulled or
// pushed.
func greedyRun(model *photon.Model, options photon.SessionOptions, pulled bool) []photon.Token {
	options.IgnoreEOS = true
	session := must(model.NewSession(&options))
	defer session.Close()
	check(session.PrefillText(prompt) == nil, "prefill")
	if pulled {
		return pull(session, samplerTokens)
	}
	var pushed []photon.Token
	_, err := session.Generate(samplerTokens, func(token photon.Token) error {
		pushed = append(pushed, token)
		return nil
	})
	check(err == nil, "generate: %v", err)
	return pushed
}

// testTopLogprobs: SessionOptions.TopLogprobs gives each token its alternatives, the same through
// the iterator, the callback and a batch; 0 gives none and the same draws; Model.TokenPiece names
// them.
func testTopLogprobs(model *photon.Model) {
	options := photon.SessionOptions{TopLogprobs: topK, IgnoreEOS: true}
	pulled := greedyRun(model, options, true)
	checkAlternatives(pulled, topK, "pulled")
	pushed := greedyRun(model, options, false)
	check(reflect.DeepEqual(pushed, pulled), "the callback's alternatives are the iterator's: %+v",
		pushed)
	first, second := must(model.NewSession(&options)), must(model.NewSession(&options))
	defer first.Close()
	defer second.Close()
	check(first.PrefillText(prompt) == nil && second.PrefillText(prompt) == nil, "prefill")
	batched := [2][]photon.Token{}
	_, err := photon.GenerateBatch([]*photon.Session{first, second}, samplerTokens,
		func(index int, token photon.Token) error {
			batched[index] = append(batched[index], token)
			return nil
		})
	check(err == nil && reflect.DeepEqual(batched, [2][]photon.Token{pulled, pulled}),
		"a batch's alternatives: %+v, %v", batched, err)

	plain := greedyRun(model, photon.SessionOptions{}, true)
	checkAlternatives(plain, 0, "k = 0 pulled")
	quiet := greedyRun(model, photon.SessionOptions{}, false)
	checkAlternatives(quiet, 0, "k = 0 pushed")
	check(reflect.DeepEqual(ids(plain), ids(pulled)) && reflect.DeepEqual(ids(quiet), ids(pulled)),
		"alternatives leave the draws alone")
	for _, k := range []int{21, -1} { // PHOTON_MAX_TOP_LOGPROBS is 20
		_, err := model.NewSession(&photon.SessionOptions{TopLogprobs: k})
		expectError(err, fmt.Sprintf("TopLogprobs %d", k), "PHOTON_ERR_INVALID_ARGUMENT")
	}
	_, err = model.NewSession(&photon.SessionOptions{TopLogprobs: 1<<32 + 3})
	check(strings.Contains(expectError(err, "TopLogprobs over 32 bits",
		"PHOTON_ERR_INVALID_ARGUMENT").Message, "TopLogprobs"), "the field named: %v", err)

	// A token's raw bytes after the one before it are its piece when that piece is plain text: it
	// is not empty (the start of a split character) and nothing was held back before it.
	promptIDs := must(model.Tokenize(prompt, true))
	previous, held, compared := promptIDs[len(promptIDs)-1], false, 0
	for _, token := range pulled {
		raw := must(model.TokenPiece(token.ID, previous))
		if token.Piece != "" && !held {
			check(bytes.Equal(raw, []byte(token.Piece)), "token %d's bytes after %d: %q vs %q",
				token.ID, previous, raw, token.Piece)
			compared++
		}
		for _, alternative := range token.TopLogprobs {
			must(model.TokenPiece(alternative.ID, previous)) // every alternative has a piece
		}
		previous, held = token.ID, token.Piece == ""
	}
	check(compared > 0, "a plain text token's bytes are its piece: %+v", pulled)
	for _, token := range pulled {
		if !strings.HasPrefix(token.Piece, " ") || len(token.Piece) < 2 {
			continue
		}
		start := must(model.TokenPiece(token.ID, -1))
		check(bytes.Equal(start, []byte(token.Piece[1:])) &&
			bytes.Equal(start, must(model.TokenPiece(token.ID, int32(model.BOS())))),
			"at the start of the text a leading space is dropped: %+v", token)
	}
	_, err = model.TokenPiece(int32(model.VocabSize()), -1)
	expectError(err, "TokenPiece of an id outside the vocabulary", "PHOTON_ERR_BAD_TOKEN")
	_, err = model.TokenPiece(pulled[0].ID, int32(model.VocabSize()))
	expectError(err, "TokenPiece after an id outside the vocabulary", "PHOTON_ERR_BAD_TOKEN")
}

// testKVType: 16-bit KV caches, chosen by name, reported by the session, kept by a restored one.
func testKVType(model *photon.Model) {
	session := must(model.NewSession(nil))
	check(session.KVType() == "f32", "the default kv type: %q", session.KVType())
	session.Close()
	options := sampling
	options.IgnoreEOS, options.KVType = true, "bf16"
	session = must(model.NewSession(&options))
	defer session.Close()
	check(session.KVType() == "bf16", "a bf16 session's kv type: %q", session.KVType())
	check(session.PrefillText(prompt) == nil, "prefill")
	n, err := session.Generate(4, func(token photon.Token) error {
		check(token.Logprob <= 0, "a bf16 session's logprob: %v", token)
		return nil
	})
	check(err == nil && n == 4, "a bf16 session generates: %d, %v", n, err)
	restored := must(model.RestoreSession(must(session.Save())))
	defer restored.Close()
	check(restored.KVType() == "bf16", "a restored session's type: %q", restored.KVType())
	f16 := must(model.NewSession(&photon.SessionOptions{KVType: "f16"}))
	defer f16.Close()
	check(f16.KVType() == "f16", "an f16 session's kv type: %q", f16.KVType())
	_, err = model.NewSession(&photon.SessionOptions{KVType: "f8"})
	e := expectError(err, "kv type 'f8'", "PHOTON_ERR_INVALID_ARGUMENT")
	check(strings.Contains(e.Message, "f8") && strings.Contains(e.Message, "bf16"),
		"the message names the kv type: %s", e.Message)
}

// testGoroutines: Cancel from another goroutine stops a Generate, and a second call on the busy
// session fails instead of racing.
func testGoroutines(model *photon.Model) {
	session := must(model.NewSession(&photon.SessionOptions{IgnoreEOS: true}))
	defer session.Close()
	check(session.PrefillText(prompt) == nil, "prefill")
	budget := model.ContextLength() - session.Position()
	started, done := make(chan struct{}), make(chan int)
	go func() {
		first := true
		n, err := session.Generate(budget, func(photon.Token) error {
			if first {
				first = false
				close(started)
			}
			return nil
		})
		check(err == nil, "generate: %v", err)
		done <- n
	}()
	<-started
	expectError(session.Prefill([]int32{1}), "a call while another goroutine's runs",
		"PHOTON_ERR_INVALID_ARGUMENT")
	var n int
	for waiting := true; waiting; { // each call clears an earlier cancel on entry: repeat it
		session.Cancel()
		select {
		case n = <-done:
			waiting = false
		case <-time.After(10 * time.Millisecond):
		}
	}
	check(session.StopReason() == photon.StopCancelled && n < budget,
		"Cancel from another goroutine: %v after %d of %d", session.StopReason(), n, budget)
}

func testErrors(model *photon.Model, modelPath, workdir string) {
	missing := filepath.Join(workdir, "missing.photon")
	_, err := photon.Load(missing)
	check(strings.Contains(expectError(err, "missing file", "PHOTON_ERR_IO").Message, missing),
		"the message names the file")
	_, err = photon.LoadOn(modelPath, "gpu")
	check(strings.Contains(expectError(err, "bad device", "PHOTON_ERR_INVALID_ARGUMENT").Message,
		"'gpu'"), "the message names the device")

	data := must(os.ReadFile(modelPath))
	truncated := filepath.Join(workdir, "truncated.photon")
	check(os.WriteFile(truncated, data[:len(data)/2], 0o644) == nil, "write")
	_, err = photon.Load(truncated)
	check(strings.Contains(expectError(err, "truncated", "PHOTON_ERR_TRUNCATED").Message, truncated),
		"the message names the file")
	garbled := filepath.Join(workdir, "garbled.photon")
	data[100] ^= 0xFF
	check(os.WriteFile(garbled, data, 0o644) == nil, "write")
	_, err = photon.Load(garbled)
	expectError(err, "damaged header", "PHOTON_ERR_CORRUPT")

	_, err = model.RestoreSession(bytes.Repeat([]byte("not a session state "), 8))
	expectError(err, "restore of garbage",
		"PHOTON_ERR_BAD_IDENTIFIER", "PHOTON_ERR_TRUNCATED", "PHOTON_ERR_CORRUPT")
	session := must(model.NewSession(nil))
	expectError(session.Prefill([]int32{int32(model.VocabSize())}), "bad token",
		"PHOTON_ERR_BAD_TOKEN")
	check(session.Close() == nil && session.Close() == nil, "Close is idempotent")
	_, err = session.Generate(1, nil)
	check(errors.Is(err, photon.ErrClosed), "use after Close: %v", err)
}

func testSaveRestore(model *photon.Model, workdir string) {
	session := prompted(model)
	_, err := session.Generate(6, nil)
	check(err == nil, "generate")
	state := must(session.Save())
	path := filepath.Join(workdir, "go.state")
	check(session.SaveFile(path) == nil, "SaveFile")
	history := must(session.History())
	expected := ids(pull(session, 8))
	session.Close()
	check(len(state) > 0, "Save gives bytes")

	for _, restored := range []*photon.Session{
		must(model.RestoreSession(state)), must(model.RestoreSessionFile(path)),
	} {
		check(reflect.DeepEqual(must(restored.History()), history), "the restored history")
		check(reflect.DeepEqual(ids(pull(restored, 8)), expected), "the restored continuation")
		restored.Close()
	}
	restored := must(model.RestoreSession(state))
	defer restored.Close()
	check(restored.SetSampler(photon.SessionOptions{}) == nil, "SetSampler")
	n, err := restored.Generate(2, nil)
	check(n == 2 && err == nil && restored.Mode() != photon.ModeAuto, "a restored session")
}

func rssMB() float64 {
	for _, line := range strings.Split(string(must(os.ReadFile("/proc/self/status"))), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb := must(strconv.Atoi(strings.Fields(line)[1]))
			return float64(kb) / 1024
		}
	}
	panic("no VmRSS")
}

func churn(modelPath string, iteration int, close bool) {
	model := must(photon.Load(modelPath))
	options := photon.SessionOptions{ContextLength: 256, Seed: uint64(iteration)}
	session := must(model.NewSession(&options))
	check(session.Prefill([]int32{int32(model.BOS())}) == nil, "prefill")
	_, err := session.Generate(1, nil)
	check(err == nil, "generate")
	restored := must(model.RestoreSession(must(session.Save())))
	check(len(pull(restored, 1)) == 1, "a restored token")
	if close { // in a different order each time: a session keeps its model alive
		all := []interface{ Close() error }{model, session, restored}
		all[iteration%3].Close()
		for _, item := range all {
			item.Close()
		}
	}
}

func testMemory(modelPath string) {
	for i := 0; i < warmup; i++ {
		churn(modelPath, i, true)
	}
	runtime.GC()
	baseline := rssMB()
	for i := 0; i < loops; i++ {
		churn(modelPath, i, true)
	}
	closed := rssMB()
	for i := 0; i < lateLoops; i++ { // nothing closed: finalizers release the objects
		churn(modelPath, i, false)
		if i%10 == 0 {
			runtime.GC()
		}
	}
	// Finalizers run on their own goroutine after a collection: give them a few rounds.
	for i := 0; i < 10; i++ {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	late := rssMB()
	fmt.Printf("rss: %.1f MB after warm-up, %.1f MB after %d closed loops, %.1f MB after %d "+
		"collected ones\n", baseline, closed, loops, late, lateLoops)
	check(closed-baseline < closedBoundMB && late-baseline < lateBoundMB, "memory grows")
}

func testThreads(model *photon.Model, modelPath string) {
	session := prompted(model)
	expected := ids(pull(session, 8))
	session.Close()
	single := must(photon.LoadWithThreads(modelPath, 1))
	defer single.Close()
	session = prompted(single)
	defer session.Close()
	got := ids(pull(session, 8))
	check(fmt.Sprint(got) == fmt.Sprint(expected), "one thread gives the same tokens: %v %v", got,
		expected)
	_, err := photon.LoadWithThreads(modelPath, -1)
	expectError(err, "negative threads", "PHOTON_ERR_INVALID_ARGUMENT")
}

// testPrecision: the precision load option, "exact" by default on the CPU; "bf16" rounds
// activations to bf16 before each product, so its scores stay close to the exact ones (not
// equal); other text fails, naming it.
func testPrecision(model *photon.Model, modelPath string) {
	check(model.Precision() == "exact", "the CPU's default precision: %q", model.Precision())
	tokens := must(model.Tokenize(prompt, true))
	exact := must(model.Score(tokens))
	bf16 := must(photon.LoadWith(modelPath, photon.LoadOptions{Device: "cpu", Precision: "bf16"}))
	defer bf16.Close()
	check(bf16.Precision() == "bf16" && bf16.Device() == "cpu", "precision %q on %q",
		bf16.Precision(), bf16.Device())
	rounded := must(bf16.Score(tokens))
	check(len(rounded) == len(exact) && rounded[0] != rounded[0], "bf16 score's shape: %v", rounded)
	for i := 1; i < len(exact); i++ {
		r, e := float64(rounded[i]), float64(exact[i])
		check(!math.IsNaN(r) && !math.IsInf(r, 0) && math.Abs(r-e) < 0.5,
			"token %d: bf16 %v vs %v", i, r, e)
	}
	session := prompted(bf16)
	defer session.Close()
	generated := pull(session, 4)
	check(len(generated) == 4, "a bf16 model generates: %v", generated)
	for _, token := range generated {
		check(token.Logprob <= 0, "log probability %v", token)
	}
	chosen := must(photon.LoadWith(modelPath, photon.LoadOptions{Precision: "exact"}))
	check(chosen.Precision() == "exact", "precision exact: %q", chosen.Precision())
	chosen.Close()
	_, err := photon.LoadWith(modelPath, photon.LoadOptions{Device: "cpu", Precision: "fp8"})
	check(strings.Contains(expectError(err, "bad precision", "PHOTON_ERR_INVALID_ARGUMENT").Message,
		"'fp8'"), "the message names the precision")
}

func writeContinuation(session *photon.Session, out string) {
	var text []string
	for _, id := range ids(pull(session, 8)) {
		text = append(text, strconv.Itoa(int(id)))
	}
	check(os.WriteFile(out, []byte(strings.Join(text, " ")+"\n"), 0o644) == nil, "write %s", out)
}

func main() {
	mode, modelPath := os.Args[1], os.Args[2]
	switch mode {
	case "test":
		workdir := os.Args[3]
		check(os.MkdirAll(workdir, 0o755) == nil, "workdir")
		model := must(photon.Load(modelPath))
		defer model.Close()
		for _, test := range []struct {
			name string
			run  func()
		}{
			{"testModel", func() { testModel(model) }},
			{"testStreaming", func() { testStreaming(model) }},
			{"testCancel", func() { testCancel(model) }},
			{"testCancelIterator", func() { testCancelIterator(model) }},
			{"testCallbackErrors", func() { testCallbackErrors(model) }},
			{"testBatch", func() { testBatch(model) }},
			{"testRanges", func() { testRanges(model) }},
			{"testScore", func() { testScore(model) }},
			{"testScoreTop", func() { testScoreTop(model) }},
			{"testKVType", func() { testKVType(model) }},
			{"testSamplerSettings", func() { testSamplerSettings(model) }},
			{"testTopLogprobs", func() { testTopLogprobs(model) }},
			{"testLongInputs", func() { testLongInputs(os.Args[4]) }},
			{"testGoroutines", func() { testGoroutines(model) }},
			{"testErrors", func() { testErrors(model, modelPath, workdir) }},
			{"testSaveRestore", func() { testSaveRestore(model, workdir) }},
			{"testThreads", func() { testThreads(model, modelPath) }},
			{"testPrecision", func() { testPrecision(model, modelPath) }},
		} {
			test.run()
			fmt.Println("ok", test.name)
		}
	case "memory":
		testMemory(modelPath)
	case "engine":
		model := must(photon.Load(modelPath))
		defer model.Close()
		for _, test := range []struct {
			name string
			run  func()
		}{
			{"testEngineStreams", func() { testEngineStreams(model) }},
			{"testEngineTopLogprobs", func() { testEngineTopLogprobs(model) }},
			{"testEngineStepped", func() { testEngineStepped(model) }},
			{"testEnginePrefixCache", func() { testEnginePrefixCache(model) }},
			{"testEngineCancel", func() { testEngineCancel(model) }},
			{"testEngineCallbacks", func() { testEngineCallbacks(model) }},
			{"testEngineDone", func() { testEngineDone(model) }},
			{"testEngineErrors", func() { testEngineErrors(model) }},
			{"testEngineContinue", func() { testEngineContinue(model) }},
			{"testEngineOwnership", func() { testEngineOwnership(modelPath) }},
			{"testEngineExit", func() { testEngineExit(modelPath) }},
		} {
			test.run()
			fmt.Println("ok", test.name)
		}
	case "engine-memory":
		testEngineMemory(modelPath)
	case "engine-exit":
		exitWithARunningEngine(modelPath, os.Args[3], os.Args[4])
	case "save":
		model := must(photon.Load(modelPath))
		defer model.Close()
		session := prompted(model)
		defer session.Close()
		_, err := session.Generate(5, nil)
		check(err == nil && session.SaveFile(os.Args[3]) == nil, "save: %v", err)
		writeContinuation(session, os.Args[4])
	case "restore":
		model := must(photon.Load(modelPath))
		defer model.Close()
		session := must(model.RestoreSessionFile(os.Args[3]))
		defer session.Close()
		writeContinuation(session, os.Args[4])
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}

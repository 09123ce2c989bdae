// The serving engine's tests: modes engine and engine-memory of binding-test.
package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"

	"photon.sdk/photon"
)

const (
	engineTokens = 8
	engineWait   = 120 * time.Second // a bound for waits that end within a second when all is well
)

var greedy = photon.SessionOptions{IgnoreEOS: true}

// alone is the token ids a session alone generates greedily after text: what a request must give.
func alone(model *photon.Model, text string, maxTokens int) []int32 {
	session := must(model.NewSession(&greedy))
	defer session.Close()
	check(session.PrefillText(text) == nil, "prefill")
	return ids(pull(session, maxTokens))
}

func pulled(request *photon.Request) ([]int32, error) {
	var got []int32
	tokens := request.Tokens()
	for tokens.Next() {
		got = append(got, tokens.Token().ID)
	}
	return got, tokens.Err()
}

func awaitEnd(request *photon.Request) {
	finished, err := request.Wait(engineWait)
	check(finished && err == nil, "the request ends in time: %v %v", finished, err)
}

func stepToEnd(engine *photon.Engine) {
	for steps := 0; steps < 10000; steps++ {
		if must(engine.Step()) == 0 {
			return
		}
	}
}

// collector gathers a callback's tokens, which arrive on the engine's thread.
type collector struct {
	mutex  sync.Mutex
	tokens []photon.Token
}

func (c *collector) add(token photon.Token) error {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	c.tokens = append(c.tokens, token)
	return nil
}

func (c *collector) get() []photon.Token {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	return append([]photon.Token(nil), c.tokens...)
}

// Requests streamed at once, pulled by iterators on goroutines and pushed to callbacks: each gives
// exactly the tokens of its session run alone; statistics count them.
func testEngineStreams(model *photon.Model) {
	var expected [][]int32
	for _, text := range batchPrompts {
		expected = append(expected, alone(model, text, engineTokens))
	}
	engine := must(model.NewEngine(&photon.EngineOptions{MaxRunning: 4}))
	defer engine.Close()
	check(engine.Start() == nil, "start")
	var pulledRequests, pushedRequests []*photon.Request
	pushed := make([]*collector, len(batchPrompts))
	for i, text := range batchPrompts {
		pulledRequests = append(pulledRequests, must(engine.Submit(photon.RequestOptions{
			PromptText: text, Options: &greedy, MaxTokens: engineTokens})))
		pushed[i] = &collector{}
		pushedRequests = append(pushedRequests, must(engine.Submit(photon.RequestOptions{
			Prompt: must(model.Tokenize(text, true)), Options: &greedy, MaxTokens: engineTokens,
			OnToken: pushed[i].add})))
	}
	got := make([][]int32, len(pulledRequests))
	var group sync.WaitGroup
	for i, request := range pulledRequests {
		group.Add(1)
		go func(i int, request *photon.Request) {
			defer group.Done()
			got[i] = must(pulled(request))
		}(i, request)
	}
	group.Wait()
	check(reflect.DeepEqual(got, expected), "pulled tokens: %v vs alone %v", got, expected)
	for i, request := range pushedRequests {
		awaitEnd(request)
		check(reflect.DeepEqual(ids(pushed[i].get()), expected[i]), "pushed tokens of request %d", i)
	}
	all := append(pulledRequests, pushedRequests...)
	for i, request := range all {
		stats := must(request.Stats())
		promptTokens := int64(len(must(model.Tokenize(batchPrompts[i%len(batchPrompts)], true))))
		check(request.State() == photon.RequestFinished &&
			request.StopReason() == photon.StopLength && request.Err() == nil,
			"finished by length: %v %v", request.State(), request.StopReason())
		check(stats.GeneratedTokens == engineTokens && stats.PromptTokens == promptTokens &&
			stats.ReusedTokens == 0 && stats.Pauses == 0, "request stats: %+v", stats)
		check(0 <= stats.QueueSeconds && stats.QueueSeconds <= stats.FirstTokenSeconds &&
			stats.DecodeSeconds >= 0, "request times: %+v", stats)
		check(request.Close() == nil, "close")
	}
	check(engine.Stop(true) == nil, "stop") // the worker's last step has retired every request
	stats := must(engine.Stats())
	total := int64(len(all))
	check(stats.Submitted == total && stats.Finished == total && stats.Failed == 0 &&
		stats.GeneratedTokens == total*engineTokens && stats.Running == 0 && stats.Waiting == 0 &&
		stats.Steps > 0 && stats.MemoryPeak > 0 && stats.MemoryInUse == 0,
		"engine stats: %+v", stats)
}

// A request's alternatives (SessionOptions.TopLogprobs) are its session's alone, pulled and pushed
// to a callback alike.
func testEngineTopLogprobs(model *photon.Model) {
	options := photon.SessionOptions{TopLogprobs: topK, IgnoreEOS: true}
	session := must(model.NewSession(&options))
	check(session.PrefillText(prompt) == nil, "prefill")
	expected := pull(session, engineTokens)
	session.Close()
	for _, token := range expected {
		check(len(token.TopLogprobs) == topK, "alternatives: %+v", expected)
	}
	engine := must(model.NewEngine(nil))
	defer engine.Close()
	check(engine.Start() == nil, "start")
	pushed := &collector{}
	pushing := must(engine.Submit(photon.RequestOptions{
		PromptText: prompt, Options: &options, MaxTokens: engineTokens, OnToken: pushed.add}))
	defer pushing.Close()
	var pulled, plain []photon.Token
	for _, request := range []struct {
		options *photon.SessionOptions
		into    *[]photon.Token
	}{{&options, &pulled}, {&greedy, &plain}} {
		submitted := must(engine.Submit(photon.RequestOptions{
			PromptText: prompt, Options: request.options, MaxTokens: engineTokens}))
		tokens := submitted.Tokens()
		for tokens.Next() {
			*request.into = append(*request.into, tokens.Token())
		}
		check(tokens.Err() == nil && submitted.Close() == nil, "pulled: %v", tokens.Err())
	}
	awaitEnd(pushing)
	check(engine.Stop(true) == nil, "stop")
	check(reflect.DeepEqual(pulled, expected), "pulled alternatives: %+v vs alone %+v", pulled,
		expected)
	check(reflect.DeepEqual(pushed.get(), expected), "pushed alternatives: %+v vs alone %+v",
		pushed.get(), expected)
	check(len(plain) == engineTokens, "k = 0: %+v", plain)
	for _, token := range plain {
		check(token.TopLogprobs == nil, "k = 0: %+v", plain)
	}
}

// An engine stepped by the caller's loop: nothing happens between steps.
func testEngineStepped(model *photon.Model) {
	expected := alone(model, prompt, engineTokens)
	engine := must(model.NewEngine(nil))
	defer engine.Close()
	request := must(engine.Submit(photon.RequestOptions{
		PromptText: prompt, Options: &greedy, MaxTokens: engineTokens}))
	defer request.Close()
	finished, err := request.Wait(0)
	check(request.State() == photon.RequestWaiting && !finished && err == nil,
		"waiting before the first step")
	check(math.IsNaN(must(request.Stats()).QueueSeconds), "NaN before admission")
	stepToEnd(engine)
	finished, _ = request.Wait(0)
	check(finished && reflect.DeepEqual(must(pulled(request)), expected),
		"a stepped request gives the tokens of its session alone")
	check(must(engine.Step()) == 0, "a step with nothing to do")
	expectError(engine.Stop(true), "stop without a worker", "PHOTON_ERR_INVALID_ARGUMENT")
}

// With a prefix cache, a request whose prompt is a prompt read before starts from its
// save: those tokens count as reused, the engine counts the hit and the cache's bytes, and both
// requests generate what an engine without the cache generates.
func testEnginePrefixCache(model *photon.Model) {
	first := must(model.Tokenize(prompt+" "+batchPrompts[1], true))
	// The same prompt again: a RecGen model (the test model's AUTO mode) restores only that.
	second := append([]int32(nil), first...)
	run := func(engine *photon.Engine, ids []int32) (*photon.Request, []photon.Token) {
		request := must(engine.Submit(photon.RequestOptions{
			Prompt: ids, Options: &greedy, MaxTokens: engineTokens}))
		stepToEnd(engine)
		var got []photon.Token
		tokens := request.Tokens()
		for tokens.Next() {
			got = append(got, tokens.Token())
		}
		check(tokens.Err() == nil, "tokens: %v", tokens.Err())
		return request, got
	}
	uncached := must(model.NewEngine(nil))
	var expected [][]photon.Token
	for _, ids := range [][]int32{first, second} {
		request, got := run(uncached, ids)
		request.Close()
		expected = append(expected, got)
	}
	stats := must(uncached.Stats())
	check(stats.PrefixHits == 0 && stats.PrefixBytes == 0, "no cache: %+v", stats)
	uncached.Close()

	engine := must(model.NewEngine(&photon.EngineOptions{PrefixCache: 64 << 20}))
	defer engine.Close()
	request, gotFirst := run(engine, first)
	defer request.Close()
	stats = must(engine.Stats())
	check(must(request.Stats()).ReusedTokens == 0 && stats.PrefixHits == 0 && stats.PrefixBytes > 0,
		"the first prompt is read and saved: %+v", stats)
	request, gotSecond := run(engine, second)
	defer request.Close()
	requestStats := must(request.Stats())
	check(requestStats.ReusedTokens == int64(len(first)) &&
		requestStats.PromptTokens == int64(len(second)-len(first)),
		"the second starts from the first's save: %+v (%d tokens)", requestStats, len(first))
	stats = must(engine.Stats())
	check(stats.PrefixHits == 1 && stats.PrefixBytes > 0 && stats.ReusedTokens == int64(len(first)),
		"the hit is counted: %+v", stats)
	check(reflect.DeepEqual([][]photon.Token{gotFirst, gotSecond}, expected),
		"the cache changes no result: %v vs %v", [][]photon.Token{gotFirst, gotSecond}, expected)
}

// Cancel from another goroutine ends a streaming request (pulled or pushed) at the next step; the
// other requests go on.
func testEngineCancel(model *photon.Model) {
	engine := must(model.NewEngine(nil))
	defer engine.Close()
	check(engine.Start() == nil, "start")
	endless := photon.RequestOptions{PromptText: prompt, Options: &greedy}
	pulledRequest := must(engine.Submit(endless))
	got := &collector{}
	done := make(chan error)
	go func() {
		tokens := pulledRequest.Tokens()
		for tokens.Next() {
			got.add(tokens.Token())
		}
		done <- tokens.Err()
	}()
	pushed := &collector{}
	endless.OnToken = pushed.add
	pushedRequest := must(engine.Submit(endless))
	beside := must(engine.Submit(photon.RequestOptions{
		PromptText: prompt, Options: &greedy, MaxTokens: engineTokens}))
	deadline := time.Now().Add(engineWait)
	for (len(got.get()) < 2 || len(pushed.get()) < 2) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancelled := make(chan struct{})
	go func() {
		pulledRequest.Cancel()
		pushedRequest.Cancel()
		close(cancelled)
	}()
	<-cancelled
	select {
	case err := <-done:
		check(err == nil, "the iterator ends without an error: %v", err)
	case <-time.After(engineWait):
		panic("the iterator does not end after Cancel")
	}
	for i, request := range []*photon.Request{pulledRequest, pushedRequest} {
		tokens := []*collector{got, pushed}[i].get()
		awaitEnd(request)
		check(request.StopReason() == photon.StopCancelled, "cancelled: %v", request.StopReason())
		check(len(tokens) >= 2 && len(tokens) < model.ContextLength() &&
			must(request.Stats()).GeneratedTokens == int64(len(tokens)),
			"tokens before the cancel: %d", len(tokens))
		request.Close()
	}
	awaitEnd(beside)
	check(beside.StopReason() == photon.StopLength, "the request beside goes on")
	beside.Close()
	check(engine.Stop(false) == nil, "stop")
	check(must(engine.Stats()).Cancelled == 2, "cancelled requests are counted")
}

// A callback returning ErrStop stops its request alone; another error stops it and comes out of
// Wait, a panic is re-raised there; one that waits on its own engine gets an error, not a
// deadlock; a request closed from its own callback just ends.
func testEngineCallbacks(model *photon.Model) {
	engine := must(model.NewEngine(nil))
	defer engine.Close()
	check(engine.Start() == nil, "start")
	ask := photon.RequestOptions{PromptText: prompt, Options: &greedy, MaxTokens: engineTokens}
	seen := &collector{}
	ask.OnToken = func(token photon.Token) error {
		seen.add(token)
		return photon.ErrStop
	}
	stopped := must(engine.Submit(ask))
	failures := &collector{}
	failure := errors.New("stop here")
	ask.OnToken = func(token photon.Token) error {
		if failures.add(token); len(failures.get()) == 2 {
			return failure
		}
		return nil
	}
	failing := must(engine.Submit(ask))
	ask.OnToken = func(token photon.Token) error {
		panic("a panicking callback")
	}
	panicking := must(engine.Submit(ask))
	ask.OnToken = nil
	beside := must(engine.Submit(ask))
	awaitEnd(stopped)
	check(len(seen.get()) == 1 && stopped.StopReason() == photon.StopCallback,
		"ErrStop stops the request")
	finished, err := failing.Wait(engineWait)
	check(finished && err == failure, "the very error reaches Wait: %v", err)
	check(len(failures.get()) == 2 && failing.StopReason() == photon.StopCallback,
		"the error stopped its request")
	func() {
		defer func() {
			check(recover() == "a panicking callback", "the panic is re-raised by Wait")
		}()
		panicking.Wait(engineWait)
		panic("the callback's panic was swallowed")
	}()
	check(reflect.DeepEqual(must(pulled(beside)), alone(model, prompt, engineTokens)),
		"the others go on")

	ask.MaxTokens = 2
	ask.OnToken = func(photon.Token) error {
		_, err := beside.Wait(time.Second)
		return err
	}
	waiting := must(engine.Submit(ask))
	_, err = waiting.Wait(engineWait)
	e := expectError(err, "waiting on the engine from its own callback",
		"PHOTON_ERR_INVALID_ARGUMENT")
	check(strings.Contains(e.Message, "callback"), "the message says why: %s", e.Message)

	var itself *photon.Request
	ready, closed := make(chan struct{}), make(chan struct{})
	itself = must(engine.Submit(photon.RequestOptions{PromptText: prompt,
		OnToken: func(photon.Token) error {
			<-ready
			itself.Close()
			close(closed)
			return nil
		}}))
	close(ready)
	select {
	case <-closed:
	case <-time.After(engineWait):
		panic("a request closed from its own callback")
	}
	_, err = itself.Save()
	check(err == photon.ErrClosed, "use after close: %v", err)
	after := must(engine.Submit(photon.RequestOptions{
		PromptText: prompt, Options: &greedy, MaxTokens: 2}))
	awaitEnd(after)
	check(must(after.Stats()).GeneratedTokens == 2, "the engine serves on")
	check(engine.Stop(true) == nil, "stop")
	for _, request := range []*photon.Request{stopped, failing, panicking, beside, waiting, after} {
		request.Close()
	}
}

func closedInTime(done <-chan struct{}, what string) {
	select {
	case <-done:
	case <-time.After(engineWait):
		panic(what)
	}
}

// Done's channel closes once, after the last token (a request finished already: at once), for a
// request closed before it finished, and for a closed request.
func testEngineDone(model *photon.Model) {
	engine := must(model.NewEngine(nil))
	defer engine.Close()
	check(engine.Start() == nil, "start")
	tokens := &collector{}
	ask := photon.RequestOptions{PromptText: prompt, Options: &greedy, MaxTokens: engineTokens,
		OnToken: tokens.add}
	pushed := must(engine.Submit(ask))
	closedInTime(pushed.Done(), "a request's Done")
	check(len(tokens.get()) == engineTokens && pushed.StopReason() == photon.StopLength,
		"closed after the last token: %d %v", len(tokens.get()), pushed.StopReason())
	check(pushed.Done() == pushed.Done(), "one channel")
	ask.OnToken = nil
	pulledRequest := must(engine.Submit(ask))
	check(len(must(pulled(pulledRequest))) == engineTokens, "pulled")
	select {
	case <-pulledRequest.Done():
	default:
		panic("a finished request's Done is closed at once")
	}
	endless := must(engine.Submit(photon.RequestOptions{PromptText: prompt, Options: &greedy,
		OnToken: func(photon.Token) error { return nil }}))
	abandoned := endless.Done()
	endless.Close()
	closedInTime(abandoned, "a request closed before it finished")
	closedFirst := must(engine.Submit(ask))
	closedFirst.Close()
	closedInTime(closedFirst.Done(), "a closed request's Done")
	check(engine.Stop(true) == nil, "stop")
	pushed.Close()
	pulledRequest.Close()
}

// A full queue is ErrBusy; a request that fails ends with its error, which the iterator returns;
// closed objects refuse calls.
func testEngineErrors(model *photon.Model) {
	one := photon.RequestOptions{PromptText: prompt, MaxTokens: 1}
	engine := must(model.NewEngine(&photon.EngineOptions{MaxWaiting: 1}))
	first := must(engine.Submit(one))
	_, err := engine.Submit(one)
	expectError(err, "a full queue", "PHOTON_ERR_BUSY")
	check(errors.Is(err, photon.ErrBusy), "errors.Is(err, ErrBusy): %v", err)
	check(must(engine.Stats()).Refused == 1 && first.State() == photon.RequestWaiting,
		"refused submissions are counted")
	first.Close()
	engine.Close()

	engine = must(model.NewEngine(&photon.EngineOptions{MemoryBudget: 1}))
	request := must(engine.Submit(photon.RequestOptions{PromptText: prompt, MaxTokens: 4}))
	stepToEnd(engine)
	check(request.StopReason() == photon.StopError, "stop reason %v", request.StopReason())
	e := expectError(request.Err(), "the request's error", "PHOTON_ERR_OUT_OF_MEMORY")
	check(strings.Contains(e.Message, "budget"), "the request's error: %s", e.Message)
	_, err = pulled(request)
	expectError(err, "the iterator of a failed request", "PHOTON_ERR_OUT_OF_MEMORY")
	_, err = request.Save()
	expectError(err, "save of a failed request", "PHOTON_ERR_INVALID_ARGUMENT")
	check(must(engine.Stats()).Failed == 1, "failed requests are counted")
	request.Close()
	engine.Close()

	engine = must(model.NewEngine(nil))
	_, err = engine.Submit(photon.RequestOptions{MaxTokens: 1})
	expectError(err, "a request without a prompt", "PHOTON_ERR_INVALID_ARGUMENT")
	_, err = engine.Submit(photon.RequestOptions{Prompt: []int32{int32(model.VocabSize())}})
	expectError(err, "a token outside the vocabulary", "PHOTON_ERR_BAD_TOKEN")
	_, err = engine.Submit(photon.RequestOptions{PromptText: prompt, MaxTokens: -1})
	expectError(err, "negative MaxTokens", "PHOTON_ERR_INVALID_ARGUMENT")
	_, err = model.NewEngine(&photon.EngineOptions{MaxRunning: -1})
	expectError(err, "MaxRunning -1", "PHOTON_ERR_INVALID_ARGUMENT")
	one.OnToken = func(photon.Token) error { return nil }
	pushed := must(engine.Submit(one))
	_, err = pulled(pushed)
	expectError(err, "pulling a request that has a callback", "PHOTON_ERR_INVALID_ARGUMENT")
	check(pushed.Close() == nil && pushed.Close() == nil, "Close is idempotent")
	_, err = pushed.Stats()
	check(err == photon.ErrClosed, "use after close: %v", err)
	engine.Close()
	_, err = engine.Submit(one)
	check(err == photon.ErrClosed, "a closed engine: %v", err)
}

// A finished request's state and session continue it exactly as the session alone would.
func testEngineContinue(model *photon.Model) {
	expected := alone(model, prompt, 2*engineTokens)
	engine := must(model.NewEngine(nil))
	defer engine.Close()
	first := must(engine.Submit(photon.RequestOptions{
		PromptText: prompt, Options: &greedy, MaxTokens: engineTokens}))
	defer first.Close()
	stepToEnd(engine)
	check(reflect.DeepEqual(must(pulled(first)), expected[:engineTokens]), "the first half")
	state := must(first.Save())
	session := must(first.TakeSession())
	_, err := first.TakeSession()
	expectError(err, "a session taken twice", "PHOTON_ERR_INVALID_ARGUMENT")
	position := session.Position()
	byState := must(engine.Submit(photon.RequestOptions{
		State: state, Options: &greedy, MaxTokens: engineTokens}))
	defer byState.Close()
	bySession := must(engine.Submit(photon.RequestOptions{
		Session: session, MaxTokens: engineTokens}))
	defer bySession.Close()
	_, err = session.History()
	expectError(err, "a session taken over", "PHOTON_ERR_INVALID_ARGUMENT")
	stepToEnd(engine)
	for _, request := range []*photon.Request{byState, bySession} {
		check(reflect.DeepEqual(must(pulled(request)), expected[engineTokens:]),
			"the continuation equals the session's alone")
		check(must(request.Stats()).ReusedTokens == int64(position), "reused tokens")
	}
	again := must(bySession.TakeSession())
	defer again.Close()
	restored := must(model.RestoreSession(must(byState.Save())))
	defer restored.Close()
	check(again.Position() == position+engineTokens, "the taken session's history")
	check(restored.Position() == position+engineTokens, "a request's state restores")
}

// A request keeps its engine alive and the engine its model: closing them first leaves the
// request streaming.
func testEngineOwnership(modelPath string) {
	model := must(photon.Load(modelPath))
	expected := alone(model, prompt, engineTokens)
	engine := must(model.NewEngine(nil))
	model.Close()
	check(engine.Start() == nil, "start")
	request := must(engine.Submit(photon.RequestOptions{
		PromptText: prompt, Options: &greedy, MaxTokens: engineTokens}))
	engine.Close()
	runtime.GC()
	check(reflect.DeepEqual(must(pulled(request)), expected),
		"the request outlives its engine handle")
	request.Close() // the engine (and its worker) goes now
}

// exitWithARunningEngine leaves a started engine running a slow callback (its handle open, or
// closed and held by the requests) and a pulled request while the program ends: returning from
// main, or os.Exit.
func exitWithARunningEngine(modelPath, handle, how string) {
	model := must(photon.Load(modelPath))
	engine := must(model.NewEngine(nil))
	check(engine.Start() == nil, "start")
	seen := make(chan struct{}, 2)
	endless := photon.RequestOptions{PromptText: prompt, Options: &greedy}
	endless.OnToken = func(photon.Token) error {
		select {
		case seen <- struct{}{}:
		default:
		}
		time.Sleep(2 * time.Millisecond) // the worker is in the callback, or about to be, at exit
		return nil
	}
	must(engine.Submit(endless))
	endless.OnToken = nil
	must(engine.Submit(endless))
	if handle == "closed" {
		engine.Close()
	}
	<-seen
	<-seen
	if how == "exit" {
		os.Exit(0)
	}
}

// testEngineExit: a program that ends while an engine's worker runs callbacks exits cleanly and
// promptly.
func testEngineExit(modelPath string) {
	self := must(os.Executable())
	for _, handle := range []string{"open", "closed"} {
		for _, how := range []string{"return", "exit"} {
			ctx, cancel := context.WithTimeout(context.Background(), engineWait)
			output, err := exec.CommandContext(ctx, self, "engine-exit", modelPath, handle,
				how).CombinedOutput()
			cancel()
			check(err == nil, "exit with a running engine (%s handle, %s): %v %s", handle, how,
				err, output)
		}
	}
}

// churnEngine runs a model with an engine and two requests (pulled, pushed) to the end (every
// tenth by its worker), continues one from its state and takes the other's session back.
func churnEngine(modelPath string, iteration int, close bool) {
	model := must(photon.Load(modelPath))
	small := photon.SessionOptions{ContextLength: 256, Seed: uint64(iteration)}
	engine := must(model.NewEngine(&photon.EngineOptions{MaxRunning: 2}))
	pulledRequest := must(engine.Submit(photon.RequestOptions{
		Prompt: []int32{int32(model.BOS()), int32(5 + iteration%50)}, Options: &small,
		MaxTokens: 2}))
	pushedRequest := must(engine.Submit(photon.RequestOptions{
		Prompt: []int32{int32(model.BOS())}, Options: &small, MaxTokens: 2,
		OnToken: func(photon.Token) error { return nil }}))
	if iteration%10 == 0 {
		check(engine.Start() == nil, "start")
		awaitEnd(pulledRequest)
		check(engine.Stop(true) == nil, "stop")
	}
	stepToEnd(engine)
	check(len(must(pulled(pulledRequest))) == 2, "a churned request")
	awaitEnd(pushedRequest)
	continued := must(engine.Submit(photon.RequestOptions{
		State: must(pushedRequest.Save()), MaxTokens: 1}))
	session := must(pulledRequest.TakeSession())
	if close { // in a different order each time: requests keep their engine and model alive
		all := []interface{ Close() error }{model, engine, pulledRequest, pushedRequest,
			continued, session}
		all[iteration%len(all)].Close()
		for _, item := range all {
			item.Close()
		}
	}
}

func testEngineMemory(modelPath string) {
	for i := 0; i < warmup; i++ {
		churnEngine(modelPath, i, true)
	}
	runtime.GC()
	baseline := rssMB()
	for i := 0; i < loops; i++ {
		churnEngine(modelPath, i, true)
	}
	closed := rssMB()
	for i := 0; i < lateLoops; i++ { // nothing closed: finalizers release the objects
		churnEngine(modelPath, i, false)
		if i%10 == 0 {
			runtime.GC()
		}
	}
	for i := 0; i < 10; i++ { // finalizers run after a collection: give them a few rounds
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	late := rssMB()
	fmt.Printf("rss: %.1f MB after warm-up, %.1f MB after %d closed engine loops, %.1f MB after "+
		"%d collected ones\n", baseline, closed, loops, late, lateLoops)
	check(closed-baseline < closedBoundMB && late-baseline < lateBoundMB, "memory grows")
}

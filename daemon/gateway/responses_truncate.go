package gateway

import (
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// truncation "auto" (Responses API): a conversation, its earlier turns
// kept by previous_response_id, that no longer fits the model's context
// loses its oldest turns until it does, instead of failing with
// context_length_exceeded ("disabled", the default). A turn is a user
// message and everything after it up to the next user message (the
// replies, tool calls and their outputs), so a call is never kept without
// the message that asked for it, nor an output without its call. System
// and developer messages stay, and so does the last turn: a prompt that
// its last turn alone overflows fails as before.

// truncatedPrompt renders j's messages as chatPrompt does; where they
// leave fewer than room tokens of m's context, it drops the oldest turns
// from j.messages until they do, or only the last turn is left.
func (j *responsesJob) truncatedPrompt(m *modelInfo, room int) ([]int32, *apiError) {
	for {
		ids, aerr := j.chatPrompt(m, "input")
		if aerr != nil || len(ids)+room <= m.ctxLen {
			return ids, aerr
		}
		kept, ok := dropOldestTurn(j.messages)
		if !ok {
			return ids, nil // prepare answers context_length_exceeded
		}
		j.messages = kept
	}
}

// dropOldestTurn is msgs without their first turn (see above); false
// where only one turn is left.
func dropOldestTurn(msgs []tokenizer.Message) ([]tokenizer.Message, bool) {
	system := func(m tokenizer.Message) bool { return m.Role == "system" || m.Role == "developer" }
	first := -1 // the first message of a turn
	for i, m := range msgs {
		if !system(m) {
			first = i
			break
		}
	}
	if first < 0 {
		return msgs, false
	}
	end := -1 // where the next turn starts
	for i := first + 1; i < len(msgs); i++ {
		if msgs[i].Role == "user" {
			end = i
			break
		}
	}
	if end < 0 {
		return msgs, false
	}
	kept := append([]tokenizer.Message{}, msgs[:first]...)
	for _, m := range msgs[first:end] {
		if system(m) {
			kept = append(kept, m)
		}
	}
	return append(kept, msgs[end:]...), true
}

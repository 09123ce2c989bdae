// POST /v1/completions and /v1/chat/completions: one request from its body to its reply.
//
//   parse and check the body -> the prompt (text, token ids, or messages through the chat
//   template) -> with X-Conversation-Id, load the conversation from the store (store thread) ->
//   plan: continue the stored state when the prompt starts with the conversation so far, else
//   read the whole prompt -> submit to the engine -> tokens, as they come, into the reply (a
//   stream of SSE chunks, or collected) -> at the end, save the conversation (store thread) and
//   finish the reply.
#pragma once

#include <memory>

#include "serve/http.h"
#include "serve/request.h"
#include "serve/server_context.h"

namespace photon::serve {

// Starts answering `request`; the reply goes to `exchange`, now or later.
void start_completion(ServerContext& context, Endpoint endpoint, HttpRequest request,
                      std::shared_ptr<Exchange> exchange);

}  // namespace photon::serve

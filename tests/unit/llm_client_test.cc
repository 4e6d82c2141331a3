// The LLM client, endpoint configuration, --mode parsing and fenced-block extraction, against the
// loopback replay server of tests/llm/replay_server.h (no LLM endpoint is reachable from CI).
#include <gtest/gtest.h>

#include <cstdlib>

#include "../llm/replay_server.h"
#include "llm/client.h"
#include "llm/extract.h"
#include "llm/pipeline.h"

namespace qattn::llm {
namespace {

using qattn::testing::ReplayServer;

bool has_code(const support::DiagSink& d, const std::string& code) {
  for (const auto& x : d.all())
    if (x.code == code) return true;
  return false;
}

Endpoint fast(const std::string& url) {
  Endpoint ep;
  ep.url = url;
  ep.model = "replay-model";
  ep.key_env = "QATTN_TEST_LLM_KEY";
  ep.timeout_s = 5;
  ep.connect_timeout_s = 2;
  ep.retries = 2;
  ep.backoff_s = 0.01;
  return ep;
}

std::vector<Message> hello() { return {{"system", "be brief"}, {"user", "Stage 1a: say hi"}}; }

// ---- extraction ------------------------------------------------------------------------------

TEST(Extract, TakesTheLastBlockOfTheLanguage) {
  support::DiagSink d;
  auto b = extract_block("first try:\n```tl\nKernel a\n```\nno wait:\n```TL\nKernel b\n```\n```python\nx\n```\n", {"tl"}, d);
  ASSERT_TRUE(b) << d.render();
  EXPECT_EQ(*b, "Kernel b\n");
}

TEST(Extract, UnlabelledSingleBlockTildesIndentedAndUnclosed) {
  support::DiagSink d;
  EXPECT_EQ(extract_block("text\n```\nKernel x\n```\n", {"tl"}, d).value_or(""), "Kernel x\n");
  EXPECT_EQ(extract_block("  ~~~~ tl {.numberLines}\nKernel y\n  ~~~~\n", {"tl"}, d).value_or(""), "Kernel y\n");
  auto cut = fenced_blocks("```cuda\nint main() {\n");  // a reply cut at max_tokens
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_FALSE(cut[0].closed);
  EXPECT_EQ(cut[0].text, "int main() {\n");
  EXPECT_EQ(extract_block("```cu\r\nint x;\r\n```\r\n", {"cuda", "cu"}, d).value_or(""), "int x;\n");
  EXPECT_FALSE(d.has_errors());
}

TEST(Extract, NoBlockAndEmptyBlockAreDiagnostics) {
  support::DiagSink d;
  EXPECT_FALSE(extract_block("Sure! The algorithm is FlashAttention.", {"tl"}, d));
  EXPECT_TRUE(has_code(d, "LLM0201"));
  support::DiagSink d2;
  EXPECT_FALSE(extract_block("```python\nprint(1)\n```\n```js\nx\n```", {"tl"}, d2));
  EXPECT_TRUE(has_code(d2, "LLM0201"));
  EXPECT_NE(d2.render().find("found: python, js"), std::string::npos);
  support::DiagSink d3;
  EXPECT_FALSE(extract_block("```tl\n  \n```", {"tl"}, d3));
  EXPECT_TRUE(has_code(d3, "LLM0202"));
}

// ---- --mode ----------------------------------------------------------------------------------

TEST(Modes, Parse) {
  support::DiagSink d;
  auto m = parse_modes("rules", d);
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->any_llm());
  m = parse_modes("llm", d);
  EXPECT_EQ(m->str(), "1a=llm,1b=llm,2=llm");
  m = parse_modes("llm+rules", d);
  EXPECT_EQ(m->str(), "1a=llm+rules,1b=llm+rules,2=llm+rules");
  m = parse_modes("1a=llm, 2=llm+rules", d);
  EXPECT_EQ(m->str(), "1a=llm,1b=rules,2=llm+rules");
  m = parse_modes("llm,2=rules", d);
  EXPECT_EQ(m->str(), "1a=llm,1b=llm,2=rules");
  EXPECT_FALSE(m->llm_writes_cuda());
  m = parse_modes("vanilla", d);
  EXPECT_TRUE(m->vanilla && m->llm_writes_cuda());
  EXPECT_FALSE(d.has_errors());
  for (const char* bad : {"", "gpt", "1c=llm", "1a=gpt", "2=rules,llm", "1a=", ","}) {
    support::DiagSink e;
    EXPECT_FALSE(parse_modes(bad, e)) << bad;
    EXPECT_TRUE(has_code(e, "LLM0401")) << bad;
  }
}

// ---- endpoint configuration ------------------------------------------------------------------

TEST(Endpoint, NoneConfiguredSaysHowAndThatRulesIsTheDefault) {
  unsetenv("QATTN_LLM_URL");
  unsetenv("QATTN_LLM_MODEL");
  support::DiagSink d;
  EXPECT_FALSE(resolve_endpoint({}, d));
  ASSERT_TRUE(has_code(d, "LLM0101"));
  const std::string text = d.render();
  for (const char* want : {"QATTN_LLM_URL", "QATTN_LLM_MODEL", "--llm-url", "QATTN_LLM_API_KEY", "rules is the default"})
    EXPECT_NE(text.find(want), std::string::npos) << want;
}

TEST(Endpoint, FlagsEnvironmentAndBadValues) {
  setenv("QATTN_LLM_URL", "http://127.0.0.1:9/v1/", 1);
  setenv("QATTN_LLM_MODEL", "env-model", 1);
  support::DiagSink d;
  EndpointFlags f;
  f.model = "flag-model";
  f.timeout_s = 0.5;
  f.retries = 0;
  auto ep = resolve_endpoint(f, d);
  ASSERT_TRUE(ep) << d.render();
  EXPECT_EQ(ep->model, "flag-model");
  EXPECT_EQ(ep->completions_url(), "http://127.0.0.1:9/v1/chat/completions");
  EXPECT_EQ(ep->timeout_s, 0.5);
  EXPECT_EQ(ep->retries, 0);
  EXPECT_EQ(ep->key_env, "QATTN_LLM_API_KEY");
  unsetenv("QATTN_LLM_MODEL");
  support::DiagSink d2;
  EndpointFlags g;
  g.url = "ftp://x";
  g.key_env = "sk-not-a-name!";
  g.timeout_s = -1;
  g.retries = 99;
  EXPECT_FALSE(resolve_endpoint(g, d2));
  for (const char* code : {"LLM0102", "LLM0103", "LLM0104", "LLM0105"}) EXPECT_TRUE(has_code(d2, code)) << code;
  EXPECT_EQ(d2.render().find("sk-not-a-name!"), std::string::npos) << "a key passed by mistake must not be echoed";
  support::DiagSink d3;
  EndpointFlags h;
  h.model = "m";
  h.key_env = "QATTN_TEST_UNSET_KEY_VARIABLE";
  unsetenv("QATTN_TEST_UNSET_KEY_VARIABLE");
  EXPECT_FALSE(resolve_endpoint(h, d3));
  EXPECT_TRUE(has_code(d3, "LLM0103"));
  unsetenv("QATTN_LLM_URL");
}

// ---- reply parsing: nothing an endpoint sends can crash the client ---------------------------

TEST(ParseReply, GoodReplyAndTokens) {
  support::DiagSink d;
  auto r = parse_reply(R"({"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
                          "usage":{"prompt_tokens":12,"completion_tokens":3}})", d);
  ASSERT_TRUE(r) << d.render();
  EXPECT_EQ(r->content, "hi");
  EXPECT_EQ(r->prompt_tokens, 12);
  EXPECT_EQ(r->completion_tokens, 3);
  support::DiagSink d2;
  ASSERT_TRUE(parse_reply(R"({"choices":[{"message":{"content":"x"},"finish_reason":"length"}]})", d2));
  EXPECT_TRUE(has_code(d2, "LLM0124"));
  EXPECT_FALSE(d2.has_errors());
}

TEST(ParseReply, MalformedRepliesAreDiagnostics) {
  const std::pair<std::string, const char*> cases[] = {
      {"", "LLM0121"},
      {"<html>502 Bad Gateway</html>", "LLM0121"},
      {"{\"choices\": [", "LLM0121"},
      {std::string("{\"choices\":[{\"message\":{\"content\":\"\xc3\x28\"}}]}"), "LLM0121"},  // not UTF-8
      {"[]", "LLM0122"},
      {"{}", "LLM0122"},
      {"{\"choices\": []}", "LLM0122"},
      {"{\"choices\": [1]}", "LLM0122"},
      {"{\"choices\": [{\"message\": {\"content\": null}}]}", "LLM0122"},
      {"{\"choices\": [{\"message\": {\"content\": 42}}]}", "LLM0122"},
      {"{\"error\": {\"message\": \"model not found\"}}", "LLM0122"},
      {"{\"choices\": [{\"message\": {\"content\": \"ok\"}}], \"usage\": {\"prompt_tokens\": \"many\"}}", nullptr},
  };
  for (const auto& [body, code] : cases) {
    support::DiagSink d;
    auto r = parse_reply(body, d);
    if (!code) {
      EXPECT_TRUE(r) << body;
      continue;
    }
    EXPECT_FALSE(r) << body;
    EXPECT_TRUE(has_code(d, code)) << body << "\n" << d.render();
  }
}

TEST(Client, RequestBodyHasModelMessagesAndNoKey) {
  setenv("QATTN_TEST_LLM_KEY", "sk-test-body-0123456789", 1);
  auto body = request_body(fast("http://x/v1"), hello());
  EXPECT_NE(body.find("\"model\":\"replay-model\""), std::string::npos);
  EXPECT_NE(body.find("Stage 1a: say hi"), std::string::npos);
  EXPECT_EQ(body.find("sk-test-body"), std::string::npos);
}

// ---- the client against the loopback server --------------------------------------------------

TEST(Client, KeyOnlyInTheAuthorizationHeaderAndTokensCounted) {
  setenv("QATTN_TEST_LLM_KEY", "sk-replay-SECRET-1234567890", 1);
  ReplayServer srv("clean_run.json");
  Client c(fast(srv.url()));
  support::DiagSink d;
  auto r = c.chat({{"user", "Stage 1a flash_fwd_llama3_8b mask: causal Copy Q from global to shared"}}, d);
  ASSERT_TRUE(r) << d.render();
  EXPECT_NE(r->content.find("```tl"), std::string::npos);
  EXPECT_EQ(r->prompt_tokens, 9120);
  EXPECT_EQ(r->completion_tokens, 410);
  EXPECT_EQ(r->attempts, 1);
  EXPECT_EQ(c.usage().prompt_tokens, 9120);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].authorization, "Bearer sk-replay-SECRET-1234567890");
  EXPECT_EQ(reqs[0].body.find("SECRET"), std::string::npos);
  EXPECT_TRUE(srv.failures().empty()) << srv.failures()[0];
  EXPECT_EQ(c.redact("a sk-replay-SECRET-1234567890 b"), "a [redacted] b");
  unsetenv("QATTN_TEST_LLM_KEY");
  ReplayServer srv2("rate_limited.json");
  Client c2(fast(srv2.url()));
  ASSERT_TRUE(c2.chat(hello(), d)) << d.render();
  EXPECT_EQ(srv2.requests().back().authorization, "") << "no key variable: no Authorization header";
}

TEST(Client, RateLimitedThenSuccess) {
  ReplayServer srv("rate_limited.json");
  Client c(fast(srv.url()));
  support::DiagSink d;
  auto r = c.chat(hello(), d);
  ASSERT_TRUE(r) << d.render();
  EXPECT_EQ(r->attempts, 2);
  EXPECT_EQ(c.usage().retries, 1);
  EXPECT_EQ(srv.served(), 2u);
  EXPECT_FALSE(d.has_errors());
}

TEST(Client, ServerErrorsUntilRetriesRunOut) {
  ReplayServer srv("server_errors.json");
  Endpoint ep = fast(srv.url());
  ep.retries = 3;
  Client c(ep);
  support::DiagSink d;
  EXPECT_FALSE(c.chat(hello(), d));
  ASSERT_TRUE(has_code(d, "LLM0114")) << d.render();
  EXPECT_NE(d.render().find("HTTP 500 on 4 attempts in a row"), std::string::npos) << d.render();
  EXPECT_NE(d.render().find("server had an error"), std::string::npos) << "the endpoint's own message is shown";
  EXPECT_EQ(srv.served(), 4u);
}

TEST(Client, TimeoutAfterRetriesAndTimeoutThenAnswer) {
  {
    ReplayServer srv("timeout.json");
    Endpoint ep = fast(srv.url());
    ep.timeout_s = 0.2;
    ep.retries = 1;
    Client c(ep);
    support::DiagSink d;
    EXPECT_FALSE(c.chat(hello(), d));
    EXPECT_TRUE(has_code(d, "LLM0112")) << d.render();
    EXPECT_NE(d.render().find("--llm-timeout"), std::string::npos);
  }
  {
    ReplayServer srv("timeout_then_answer.json");
    Endpoint ep = fast(srv.url());
    ep.timeout_s = 0.2;
    Client c(ep);
    support::DiagSink d;
    auto r = c.chat(hello(), d);
    ASSERT_TRUE(r) << d.render();
    EXPECT_EQ(r->attempts, 2);
  }
}

TEST(Client, HttpErrorsThatAreNotRetried) {
  ReplayServer srv(R"({"exchanges": [{"status": 401, "body": "{\"error\": {\"message\": \"Incorrect API key provided\"}}"},
                                     {"status": 404, "body": "not found"}]})");
  Client c(fast(srv.url()));
  support::DiagSink d;
  EXPECT_FALSE(c.chat(hello(), d));
  EXPECT_TRUE(has_code(d, "LLM0113"));
  EXPECT_NE(d.render().find("QATTN_TEST_LLM_KEY"), std::string::npos) << "the hint names the key variable";
  support::DiagSink d2;
  EXPECT_FALSE(c.chat(hello(), d2));
  EXPECT_NE(d2.render().find("base URL"), std::string::npos);
  EXPECT_EQ(srv.served(), 2u);
}

TEST(Client, BadBodiesHugeRepliesAndNonUtf8AreDiagnostics) {
  ReplayServer srv(R"({"exchanges": [
      {"body": "this is not json"},
      {"body": "{\"id\": \"x\", \"choices\": []}"},
      {"body_hex": "7b 22 63 68 6f 69 63 65 73 22 3a 20 ff fe 7d"},
      {"body_repeat": ["0123456789abcdef", 262144]}]})");
  Endpoint ep = fast(srv.url());
  ep.max_reply_bytes = 1 << 20;  // the last body is 4 MiB
  // (generous time limits: under a sanitizer on a loaded machine an attempt given up on by its timeout
  // still consumes its exchange, and the retry then meets the replay's end instead of the body)
  ep.timeout_s = 60, ep.connect_timeout_s = 30;
  Client c(ep);
  for (const char* code : {"LLM0121", "LLM0122", "LLM0121", "LLM0123"}) {
    support::DiagSink d;
    EXPECT_FALSE(c.chat(hello(), d));
    EXPECT_TRUE(has_code(d, code)) << code << ": " << d.render();
  }
}

TEST(Client, ConnectionRefusedAndDnsFailure) {
  int port = 0;
  {
    ReplayServer srv(R"({"exchanges": []})");
    port = srv.port();
  }  // closed: nothing listens there now
  Client c(fast("http://127.0.0.1:" + std::to_string(port) + "/v1"));
  support::DiagSink d;
  EXPECT_FALSE(c.chat(hello(), d));
  EXPECT_TRUE(has_code(d, "LLM0111")) << d.render();
  Endpoint ep = fast("http://qattn-replay-test.invalid/v1");  // .invalid never resolves (RFC 2606)
  Client c2(ep);
  support::DiagSink d2;
  EXPECT_FALSE(c2.chat(hello(), d2));
  EXPECT_TRUE(has_code(d2, "LLM0111") || has_code(d2, "LLM0112")) << d2.render();
}

}  // namespace
}  // namespace qattn::llm

// `gpuslice profile --trace` against the trace-event format, and `--html` rendered by a real
// browser (headless Chromium) without errors.
#include <nlohmann/json.hpp>

#include "cli_fixture.h"

namespace {

using namespace gpuslice::cli_test;
using nlohmann::json;

// Everything the trace-event format requires of the events gpuslice writes: complete ("X") events
// with name, ts and dur in microseconds, pid and tid; instant ("i") events with a scope; metadata
// ("M") events naming processes and threads. Returns the problems found (empty: valid).
std::vector<std::string> trace_event_format_errors(const json& doc) {
  std::vector<std::string> errors;
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return {"no traceEvents array"};
  }
  std::size_t index = 0;
  for (const json& e : doc["traceEvents"]) {
    std::string where = "event " + std::to_string(index++) + ": ";
    if (!e.is_object()) {
      errors.push_back(where + "not an object");
      continue;
    }
    for (const char* key : {"name", "ph", "pid", "tid"}) {
      if (!e.contains(key)) errors.push_back(where + "no " + key);
    }
    if (!e.value("name", json()).is_string()) errors.push_back(where + "name is not a string");
    if (!e.value("pid", json()).is_number_integer()) errors.push_back(where + "pid is not an integer");
    if (!e.value("tid", json()).is_number_integer()) errors.push_back(where + "tid is not an integer");
    std::string ph = e.value("ph", "");
    if (ph == "X") {
      if (!e.contains("ts") || !e["ts"].is_number() || e["ts"].get<double>() < 0)
        errors.push_back(where + "bad ts");
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0) {
        errors.push_back(where + "bad dur");
      }
    } else if (ph == "i") {
      if (!e.contains("ts") || !e["ts"].is_number()) errors.push_back(where + "bad ts");
      std::string scope = e.value("s", "");
      if (scope != "t" && scope != "p" && scope != "g") errors.push_back(where + "bad instant scope");
    } else if (ph == "M") {
      if (!e.contains("args") || !e["args"].contains("name"))
        errors.push_back(where + "metadata without args.name");
    } else {
      errors.push_back(where + "unexpected phase '" + ph + "'");
    }
  }
  return errors;
}

class ProfileExportTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    profile_ = dir_ + "/profile";
    std::filesystem::create_directory(profile_);
    // Two calls overlap (they cannot be one thread's), a copy in each direction, a refusal.
    std::ofstream(profile_ + "/metrics.log") << "name:cuLaunchKernel\ncount:3\nburst:9000\n";
    std::ofstream(profile_ + "/timeline.log") << "name:cuLaunchKernel start:1000000000000 burst:3000\n"
                                                 "name:cuLaunchKernel start:1000000001000 burst:3000\n"
                                                 "name:cuMemcpyH2D start:1000000010000 burst:2500\n"
                                                 "name:cuMemcpyD2H start:1000000020000 burst:1500\n"
                                                 "name:cuLaunchKernel start:1000000030000 burst:3000\n";
    std::ofstream(profile_ + "/events.log")
        << "time:1000000025000 pid:4242 event:allocation_refused device:0 requested:3221225472 "
           "quota:8589934592 in_use:6442450944 suppressed:0 top:pid 4242 python 6.0 GiB\n";
  }
  std::string profile_;
};

TEST_F(ProfileExportTest, TraceFollowsTheTraceEventFormat) {
  std::string trace = dir_ + "/trace.json";
  Outcome o = run({"profile", "--trace", trace, profile_});
  ASSERT_EQ(o.status, 0) << o.err;
  json doc = json::parse(read_file(trace));
  auto errors = trace_event_format_errors(doc);
  EXPECT_TRUE(errors.empty()) << errors.front();

  std::vector<json> complete, instants;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "X") complete.push_back(e);
    if (e["ph"] == "i") instants.push_back(e);
  }
  ASSERT_EQ(complete.size(), 5u) << "one complete event per call";
  // Microseconds since the first event: 1 us after the first call, lasting 3 us.
  EXPECT_DOUBLE_EQ(complete[1]["ts"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(complete[1]["dur"].get<double>(), 3.0);
  EXPECT_EQ(doc["otherData"]["start_epoch_ns"], 1000000000000ULL);
  EXPECT_NE(complete[0]["tid"], complete[1]["tid"]) << "overlapping calls share a track";
  EXPECT_EQ(complete[2]["cat"], "memcpy");
  EXPECT_EQ(complete[2]["args"]["direction"], "H2D");
  EXPECT_EQ(complete[3]["args"]["direction"], "D2H");
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0]["name"], "allocation refused");
  EXPECT_EQ(instants[0]["pid"], 4242);
  EXPECT_EQ(instants[0]["args"]["requested_bytes"], 3221225472ULL);
  EXPECT_DOUBLE_EQ(instants[0]["ts"].get<double>(), 25.0);
}

TEST_F(ProfileExportTest, TraceUsesPidAndTidWhenTheTimelineHasThem) {
  std::ofstream(profile_ + "/timeline.log") << "name:cuInit start:100 burst:10 pid:7 tid:9\n"
                                               "name:cuInit start:105 burst:10 pid:8 tid:8\n";
  Outcome o = run({"profile", "--trace", "-", profile_});
  ASSERT_EQ(o.status, 0) << o.err;
  json doc = json::parse(o.out);
  EXPECT_TRUE(trace_event_format_errors(doc).empty());
  std::set<std::pair<int, int>> tracks;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "X") tracks.insert({e["pid"].get<int>(), e["tid"].get<int>()});
  }
  EXPECT_EQ(tracks, (std::set<std::pair<int, int>>{{7, 9}, {8, 8}}));
}

TEST_F(ProfileExportTest, HtmlPageIsSelfContained) {
  std::string page = dir_ + "/profile.html";
  std::ofstream(profile_ + "/timeline.log", std::ios::app)
      << "name:cu</script><b>x start:1000000040000 burst:5\n";
  Outcome o = run({"profile", "--html", page, profile_});
  ASSERT_EQ(o.status, 0) << o.err;
  std::string html = read_file(page);
  for (const char* external : {"src=", "href=", "url(", "@import"}) {
    EXPECT_FALSE(contains(html, external)) << "the page loads something: " << external;
  }
  EXPECT_FALSE(contains(html, "</script><b>")) << "a name from the file closed the script element";
  EXPECT_TRUE(contains(html, "id=\"render-status\"")) << html.substr(0, 400);
}

// Chromium with everything that reaches the network or a profile switched off.
std::string chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return {};
}

TEST_F(ProfileExportTest, HtmlPageRendersInHeadlessChromiumWithoutErrors) {
  std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (CI installs it: Makefile TEST_PACKAGES)";
  std::string page = dir_ + "/profile.html";
  ASSERT_EQ(run({"profile", "--html", page, profile_}).status, 0);
  std::string user_dir = dir_ + "/chromium-user";
  std::filesystem::create_directory(user_dir);
  std::string command = browser +
                        " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                        " --disable-background-networking --disable-component-update --disable-sync"
                        " --enable-logging=stderr --v=0 --user-data-dir=" +
                        user_dir + " --dump-dom file://" + page + " >" + dir_ + "/dom.html 2>" + dir_ +
                        "/chromium.log";
  ASSERT_EQ(std::system(command.c_str()), 0) << read_file(dir_ + "/chromium.log");
  std::string dom = read_file(dir_ + "/dom.html");
  std::string log = read_file(dir_ + "/chromium.log");
  EXPECT_TRUE(contains(dom, "data-rendered=\"yes\"")) << "the page's script did not finish: " << log;
  EXPECT_TRUE(contains(dom, "Rendered 3 APIs, 5 calls and 1 refused allocations.")) << dom.substr(0, 2000);
  EXPECT_TRUE(contains(dom, "<rect")) << "no chart or timeline drawn";
  EXPECT_FALSE(contains(log, "Uncaught")) << log;
  EXPECT_FALSE(contains(log, "CONSOLE")) << "console output from the page: " << log;
}

}  // namespace

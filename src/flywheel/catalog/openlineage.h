// OpenLineage 2-0-2 RunEvents for catalog runs, and where they go: a JSON
// Lines file and/or an HTTP endpoint (Marquez-compatible POST
// /api/v1/lineage). Event layout and facets: docs/catalog.md, "OpenLineage".
//
// Thread-safety: EventSink::Send may be called from any thread (a file sink
// appends whole lines under an advisory lock, so several processes may share
// one file).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/catalog/catalog.h"

namespace flywheel::catalog {

class EventSink {
 public:
  virtual ~EventSink() = default;
  // Delivers one event (a JSON object on one line, without the newline).
  virtual Status Send(const std::string& event) = 0;
  virtual std::string Describe() const = 0;
};

// Appends each event as one line to `path` (created if absent).
std::unique_ptr<EventSink> MakeFileSink(const std::string& path);
// POSTs each event to `<base_url>/api/v1/lineage` ("http://host:port[/prefix]";
// https is refused with a clear error at Send). A non-2xx answer, a refused
// connection or no answer within `timeout_ms` is an error naming the URL.
std::unique_ptr<EventSink> MakeHttpSink(const std::string& base_url, int timeout_ms = 5000);

// What an event says about a dataset beyond its name: the table's location
// and schema at the version the edge names.
struct DatasetFacts {
  std::string uri;
  std::string schema_json;  // [{"name":..,"type":..}, ...] or empty
};

// Builds a RunEvent. `event_type` is START, COMPLETE, FAIL or ABORT;
// `facts` is keyed by Node::ToString() of dataset edges.
std::string BuildRunEvent(const RunInfo& run, const std::string& event_type, const std::vector<Edge>& edges,
                          const std::map<std::string, DatasetFacts>& facts, int64_t event_time_ms);

// The producer URI every event and facet carries.
inline constexpr const char* kOpenLineageProducer = "urn:flywheel:0.1.0";

}  // namespace flywheel::catalog

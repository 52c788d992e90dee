// JsonReader: reads typed fields out of a parsed JSON object that crossed a trust boundary (an
// event, a control-channel message) without ever throwing: each read checks the field's type,
// range and size, and the first field that is wrong is kept as the error ("'code' must be an
// integer"). A missing field leaves its output as it was, unless it is required. Works over
// nlohmann::json and nlohmann::ordered_json alike. Not thread-safe; pure. stringItems() reads a
// list of strings from data that needs no error: a file cohort wrote or a tool's report.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace cohort {

template <class Json>
class JsonReader {
 public:
  // `max_string`: the longest string (in bytes) a field may hold.
  JsonReader(const Json& object, size_t max_string) : object_(object), max_string_(max_string) {}

  const std::string& error() const { return error_; }

  bool has(const char* key) const { return object_.contains(key); }

  template <class Int>
  void integer(const char* key, Int& out, bool required = false) {
    auto it = object_.find(key);
    if (it == object_.end()) {
      if (required) wrong(key, "is missing");
      return;
    }
    if (!it->is_number_integer()) return wrong(key, "must be an integer");
    if (it->is_number_unsigned()) {
      auto v = it->template get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<Int>::max())) {
        return wrong(key, "is out of range");
      }
      out = static_cast<Int>(v);
      return;
    }
    auto v = it->template get<int64_t>();
    if (v < static_cast<int64_t>(std::numeric_limits<Int>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<Int>::max())) {
      return wrong(key, "is out of range");
    }
    out = static_cast<Int>(v);
  }

  void optionalInt(const char* key, std::optional<int>& out) {
    if (!has(key)) return;
    int v = 0;
    integer(key, v);
    if (error_.empty()) out = v;
  }

  void number(const char* key, double& out) {
    auto it = object_.find(key);
    if (it == object_.end()) return;
    if (!it->is_number()) return wrong(key, "must be a number");
    double v = it->template get<double>();
    if (!std::isfinite(v)) return wrong(key, "must be finite");
    out = v;
  }

  void optionalNumber(const char* key, std::optional<double>& out) {
    if (!has(key)) return;
    double v = 0;
    number(key, v);
    if (error_.empty()) out = v;
  }

  void boolean(const char* key, bool& out) {
    auto it = object_.find(key);
    if (it == object_.end()) return;
    if (!it->is_boolean()) return wrong(key, "must be true or false");
    out = it->template get<bool>();
  }

  void text(const char* key, std::string& out, bool required = false) {
    auto it = object_.find(key);
    if (it == object_.end()) {
      if (required) wrong(key, "is missing");
      return;
    }
    if (!it->is_string()) return wrong(key, "must be a string");
    const auto& s = it->template get_ref<const std::string&>();
    if (s.size() > max_string_) {
      return wrong(key, "is longer than " + std::to_string(max_string_) + " bytes");
    }
    out = s;
  }

  // The array at `key` (nullptr when it is missing); at most `max_items` items.
  const Json* array(const char* key, size_t max_items) {
    auto it = object_.find(key);
    if (it == object_.end()) return nullptr;
    if (!it->is_array()) {
      wrong(key, "must be a list");
      return nullptr;
    }
    if (it->size() > max_items) {
      wrong(key, "has more than " + std::to_string(max_items) + " items");
      return nullptr;
    }
    return &*it;
  }

  // A problem found by the caller, kept as the error when there is none yet.
  void wrong(const char* key, const std::string& what) {
    if (error_.empty()) error_ = std::string("'") + key + "' " + what;
  }

 private:
  const Json& object_;
  size_t max_string_;
  std::string error_;
};

// The strings of the JSON array `j`, in order: items of another type are passed over, and a `j`
// that is not an array gives none.
template <class Json>
std::vector<std::string> stringItems(const Json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const Json& item : j) {
    if (item.is_string()) out.push_back(item.template get<std::string>());
  }
  return out;
}

}  // namespace cohort

#include "server/console.h"

#include <openssl/evp.h>

namespace cohort::server {

// Generated from the built console page (web/, built by Vite) by cmake/embed.cmake.
extern const char kConsoleHtml[];
extern const std::size_t kConsoleHtmlSize;

namespace {

// The CSP source for the text of the page's first `tag` element (between the end of its
// opening tag, which may carry attributes, and its closing tag): 'sha256-<base64 of the
// digest>', as browsers hash an inline element's content. 'none' when the page has none.
std::string inlineHash(std::string_view page, std::string_view tag) {
  const std::string open = "<" + std::string(tag);
  const std::string close = "</" + std::string(tag) + ">";
  size_t start = page.find(open);
  if (start != std::string_view::npos) start = page.find('>', start);
  if (start == std::string_view::npos) return "'none'";
  start += 1;
  size_t end = page.find(close, start);
  if (end == std::string_view::npos) return "'none'";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(page.data() + start, end - start, digest, &length, EVP_sha256(), nullptr);
  unsigned char base64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  int n = EVP_EncodeBlock(base64, digest, static_cast<int>(length));
  return "'sha256-" + std::string(reinterpret_cast<const char*>(base64), static_cast<size_t>(n)) +
         "'";
}

}  // namespace

std::string_view consolePage() { return {kConsoleHtml, kConsoleHtmlSize}; }

const std::string& consoleContentSecurityPolicy() {
  static const std::string policy = [] {
    std::string_view page = consolePage();
    return "default-src 'none'; script-src " + inlineHash(page, "script") + "; style-src " +
           inlineHash(page, "style") +
           "; connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; "
           "form-action 'none'; frame-ancestors 'none'";
  }();
  return policy;
}

bool isConsolePath(const std::string& path) { return path == "/" || path == "/console"; }

void consoleAnswer(http::Response& res) {
  std::string_view html = consolePage();
  res.status = 200;
  res.setContent(std::string(html), "text/html; charset=utf-8");
  res.setHeader("Cache-Control", "no-cache");
  res.setHeader("Content-Security-Policy", consoleContentSecurityPolicy());
  res.setHeader("X-Content-Type-Options", "nosniff");
  res.setHeader("Referrer-Policy", "no-referrer");
}

}  // namespace cohort::server

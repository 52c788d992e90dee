// The web console: web/console.html, one self-contained page (HTML, CSS and script, nothing
// fetched from elsewhere) compiled into the binary at build time (cmake/embed.cmake) and served
// by `cohort server` at / and /console. The page itself needs no token: it asks for one and then
// speaks the JSON API with it, like any other client. Its Content-Security-Policy lets the page
// run only its own inline <style> and <script> (allowed by their SHA-256 hashes) and talk only
// to the server that served it. Everything here is immutable after first use; any thread may
// call it.
#pragma once

#include <string>
#include <string_view>

#include "server/http.h"

namespace cohort::server {

// The page, as built into the binary.
std::string_view consolePage();

// The Content-Security-Policy header value the page is served with.
const std::string& consoleContentSecurityPolicy();

// The page's paths, / and /console (GET only). They are not API routes: not counted in
// Server::routes() (which the OpenAPI document must match) nor in the HTTP metrics.
bool isConsolePath(const std::string& path);
// Answers with the page and its headers.
void consoleAnswer(http::Response& res);

}  // namespace cohort::server

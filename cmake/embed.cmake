# Writes a C++ source that holds a text file as a raw string literal, run at build time:
#   cmake -DINPUT=web/console.html -DOUTPUT=console_html.cc -DNAMESPACE=cohort::server
#         -DSYMBOL=kConsoleHtml -P cmake/embed.cmake
# The source defines `extern const char SYMBOL[]` (NUL-terminated) and `extern const
# std::size_t SYMBOLSize` (without the NUL) in NAMESPACE. The output is rewritten only when it
# changes, so an unchanged page recompiles nothing.
foreach(var INPUT OUTPUT NAMESPACE SYMBOL)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed.cmake: -D${var}=... is missing")
  endif()
endforeach()

file(READ "${INPUT}" content)
set(delimiter "cohort_embed")
if(content MATCHES "\\)${delimiter}\"")
  message(FATAL_ERROR "embed.cmake: ${INPUT} contains ')${delimiter}\"', which would end the "
                      "raw string literal early")
endif()

set(text "// Generated from ${INPUT} by cmake/embed.cmake at build time: do not edit.\n")
string(APPEND text "#include <cstddef>\n\nnamespace ${NAMESPACE} {\n\n")
string(APPEND text "extern const char ${SYMBOL}[];\n")
string(APPEND text "extern const std::size_t ${SYMBOL}Size;\n")
string(APPEND text "const char ${SYMBOL}[] = R\"${delimiter}(${content})${delimiter}\";\n")
string(APPEND text "const std::size_t ${SYMBOL}Size = sizeof(${SYMBOL}) - 1;\n\n")
string(APPEND text "}  // namespace ${NAMESPACE}\n")

file(WRITE "${OUTPUT}.tmp" "${text}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")

// Builds the console into one self-contained page, console.html, that cmake/embed.cmake
// compiles into the binary: the bundled script and style are written into the page, so the
// server sends one file and its Content-Security-Policy can allow exactly that script and that
// style by their hashes (src/server/console.cc).
import { defineConfig } from "vite";

// Replaces the emitted <script src> and <link rel=stylesheet> with the chunk and the style
// themselves, and drops those files from the output.
function inlineIntoPage() {
  return {
    name: "cohort-inline-into-page",
    enforce: "post",
    generateBundle(_options, bundle) {
      const page = Object.values(bundle).find((f) => f.fileName.endsWith(".html"));
      if (!page) this.error("no page in the bundle");
      let html = String(page.source);
      for (const [name, file] of Object.entries(bundle)) {
        if (file === page) continue;
        const text = file.type === "chunk" ? file.code : String(file.source);
        const closing = file.type === "chunk" ? "</script" : "</style";
        if (text.toLowerCase().includes(closing)) this.error(name + " contains '" + closing + "'");
        const tag = file.type === "chunk"
          ? new RegExp('<script type="module"[^>]*src="[^"]*' + escape(name) + '"[^>]*></script>')
          : new RegExp('<link rel="stylesheet"[^>]*href="[^"]*' + escape(name) + '"[^>]*>');
        if (!tag.test(html)) this.error(name + " is not referenced by the page");
        // A function as the replacement: the text may contain `$&` and friends.
        html = html.replace(tag, () => file.type === "chunk"
          ? "<script type=\"module\">" + text.trimEnd() + "</script>"
          : "<style>" + text.trimEnd() + "</style>");
        delete bundle[name];
      }
      page.source = html;
    },
  };
}
function escape(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

export default defineConfig({
  base: "./",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsInlineLimit: Number.MAX_SAFE_INTEGER,
    cssCodeSplit: false,
    modulePreload: false,
    rollupOptions: { input: "console.html" },
    reportCompressedSize: false,
  },
  plugins: [inlineIntoPage()],
});

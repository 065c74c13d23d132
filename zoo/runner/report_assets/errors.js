// Runs first: any later script error is shown at the top of the page and marks the document.
window.addEventListener("error", function (event) {
  var text = (event.message || "error") + " (" + (event.filename || "page") + ":" +
    (event.lineno || 0) + ")";
  document.documentElement.setAttribute("data-script-error", text);
  var box = document.getElementById("script-errors");
  if (box) {
    box.hidden = false;
    box.textContent = "This report's script failed, so its tables may be incomplete: " + text +
      ". table.md beside this file has them as text.";
  }
});

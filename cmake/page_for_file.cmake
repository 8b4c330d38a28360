# The simulator's page for opening from a file: its token marks (which `cohort sim serve` fills
# in) removed.   cmake -DIN=web/sim/index.html -DOUT=build/web-sim/index.html -P page_for_file.cmake
file(READ "${IN}" text)
string(REPLACE "__TOKEN_QUERY__" "" text "${text}")
file(WRITE "${OUT}" "${text}")
